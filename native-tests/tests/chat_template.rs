//! Real chat templates rendered by ggweb's Jinja interpreter equal transformers' renderings
//! (data/chat/vectors.json, from scripts/chat-template-vectors.py) byte for byte; a template's
//! `raise_exception` and its undefined-attribute errors are errors here too.

use std::path::PathBuf;

use ggweb::models::chat::jinja::TemplateError;
use ggweb::models::chat::{ChatFormat, ChatMessage};
use serde_json::Value;

fn data() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/chat")
}

#[test]
fn templates_render_as_transformers() {
    let vectors: Value =
        serde_json::from_str(&std::fs::read_to_string(data().join("vectors.json")).unwrap())
            .unwrap();
    let mut checked = 0;
    for family in vectors.as_array().unwrap() {
        let name = family["name"].as_str().unwrap();
        let text = std::fs::read_to_string(data().join("templates").join(format!("{name}.jinja")))
            .unwrap();
        let f = ChatFormat::detect_with_tokens(
            Some(&text),
            None,
            family["bos_token"].as_str(),
            family["eos_token"].as_str(),
        );
        assert_eq!(f.name(), "jinja", "{name}: {:?}", f.note());
        for case in family["cases"].as_array().unwrap() {
            let messages: Vec<ChatMessage> = case["messages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| {
                    ChatMessage::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap())
                })
                .collect();
            let gen = case["add_generation_prompt"].as_bool().unwrap();
            let got = f.try_render(&messages, gen);
            let what = format!("{name} {messages:?} gen={gen}");
            if let Some(want) = case["expected"].as_str() {
                assert_eq!(got.as_deref(), Ok(want), "{what}");
            } else if let Some(msg) = case["raises"].as_str() {
                assert_eq!(got, Err(TemplateError::Raised(msg.into())), "{what}");
            } else {
                assert!(
                    matches!(got, Err(TemplateError::Runtime(_))),
                    "{what}: {got:?}"
                );
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 90);
}

/// A rejected conversation gets the fallback format from `render`, not an empty prompt.
#[test]
fn rejected_conversations_fall_back() {
    let text = std::fs::read_to_string(data().join("templates/gemma3.jinja")).unwrap();
    let f = ChatFormat::detect_with_tokens(Some(&text), Some("gemma3"), Some("<bos>"), None);
    let m = [ChatMessage::new("user", "a"), ChatMessage::new("user", "b")];
    assert!(matches!(
        f.try_render(&m, true),
        Err(TemplateError::Raised(_))
    ));
    assert_eq!(
        f.render(&m, true),
        "<start_of_turn>user\na<end_of_turn>\n<start_of_turn>user\nb<end_of_turn>\n<start_of_turn>model\n"
    );
}
