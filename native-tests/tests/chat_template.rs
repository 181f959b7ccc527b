//! Real chat templates rendered by ggweb's Jinja interpreter equal transformers' renderings
//! (data/chat/vectors.json, from scripts/chat-template-vectors.py) byte for byte; a template's
//! `raise_exception` and its undefined-attribute errors are errors here too.

use std::path::PathBuf;

#[path = "support/models.rs"]
mod models;

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

/// One construct per template (loops, scoping, whitespace control, filters, tests, methods,
/// literals, errors), each as jinja2 renders it with transformers' settings.
#[test]
fn constructs_render_as_jinja2() {
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(data().join("snippets.json")).unwrap())
            .unwrap();
    let messages: Vec<ChatMessage> = v["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| ChatMessage::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect();
    let cases = v["cases"].as_array().unwrap();
    assert!(cases.len() >= 25);
    let mut failed = Vec::new();
    for case in cases {
        let text = case["template"].as_str().unwrap();
        let f = ChatFormat::Jinja {
            template: Box::new(ggweb::models::chat::jinja::Template::parse(text).unwrap()),
            bos_token: None,
            eos_token: None,
            fallback: Box::new(ChatFormat::Gemma),
        };
        let got = f.try_render(&messages, false);
        let ok = if let Some(want) = case["expected"].as_str() {
            got.as_deref() == Ok(want)
        } else if let Some(msg) = case["raises"].as_str() {
            got == Err(TemplateError::Raised(msg.into()))
        } else {
            matches!(got, Err(TemplateError::Runtime(_)))
        };
        if !ok {
            failed.push(format!("{text:?}\n  got  {got:?}\n  want {}", case));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// Each family's end-of-turn texts stop generation even where the GGUF's EOS is another token
/// (as llama.cpp adds them to its end-of-generation set by text); turn openers do not.
#[test]
fn end_of_generation_tokens_per_family() {
    use ggweb::gguf::Gguf;
    use ggweb::models::tokenizer::Tokenizer;
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/vocab");
    for (vocab, eog, not_eog) in [
        (
            "phi-3",
            &["<|end|>", "<|endoftext|>"][..],
            &["<|user|>", "<|assistant|>"][..],
        ),
        ("qwen2", &["<|im_end|>", "<|endoftext|>"], &["<|im_start|>"]),
        (
            "llama-bpe",
            &["<|eot_id|>", "<|end_of_text|>"],
            &["<|start_header_id|>", "<|begin_of_text|>"],
        ),
    ] {
        let bytes = std::fs::read(fixtures.join(format!("ggml-vocab-{vocab}.gguf"))).unwrap();
        let tok = Tokenizer::from_gguf(&Gguf::parse(&bytes).unwrap()).unwrap();
        for t in eog {
            let id = tok.token_id(t).unwrap_or_else(|| panic!("{vocab}: no {t}"));
            assert!(tok.is_eog(id), "{vocab}: {t} is not end-of-generation");
        }
        for t in not_eog {
            let id = tok.token_id(t).unwrap_or_else(|| panic!("{vocab}: no {t}"));
            assert!(!tok.is_eog(id), "{vocab}: {t} is end-of-generation");
        }
        // The end of a turn is not (only) the GGUF's EOS: it is found by its text.
        let eos = tok.eos();
        assert!(eog.iter().any(|t| tok.token_id(t) != eos), "{vocab}");
    }
    // The real models' headers: Gemma 3's end of turn, SmolLM2's and Qwen2.5's ChatML end.
    for (file, eog, not_eog) in [
        (
            "gemma-3-270m-q4_k_m.gguf",
            &["<end_of_turn>", "<eos>"][..],
            &["<start_of_turn>", "<bos>"][..],
        ),
        (
            "SmolLM2-135M-Instruct.Q4_1.gguf",
            &["<|im_end|>", "<|endoftext|>"],
            &["<|im_start|>"],
        ),
        (
            "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            &["<|im_end|>", "<|endoftext|>"],
            &["<|im_start|>"],
        ),
    ] {
        let g = ggweb::gguf::GgufFile::open(models::model("GGWEB_CHAT_MODEL", file)).unwrap();
        let tok = Tokenizer::from_gguf(g.header()).unwrap();
        for t in eog {
            assert!(tok.is_eog(tok.token_id(t).unwrap()), "{file}: {t}");
        }
        for t in not_eog {
            assert!(!tok.is_eog(tok.token_id(t).unwrap()), "{file}: {t}");
        }
    }
}

/// The models' own GGUFs: the template and its special tokens are read from the metadata, and
/// the prompt for the tokenizer leaves out a BOS the tokenizer adds itself.
#[test]
fn gguf_templates_are_used() {
    use ggweb::gguf::GgufFile;
    let vectors: Value =
        serde_json::from_str(&std::fs::read_to_string(data().join("vectors.json")).unwrap())
            .unwrap();
    let want = |family: &str, case: usize| -> String {
        let f = vectors
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == family)
            .unwrap();
        f["cases"][case]["expected"].as_str().unwrap().to_string()
    };
    let msgs = [
        ChatMessage::new("system", "You are a terse assistant."),
        ChatMessage::new("user", "Hi there"),
    ];
    for (file, family) in [
        ("SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2"),
        ("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "qwen2.5-coder"),
    ] {
        let g = GgufFile::open(models::model("GGWEB_CHAT_MODEL", file)).unwrap();
        let f = ChatFormat::from_gguf(g.header());
        assert_eq!(f.name(), "jinja", "{file}: {:?}", f.note());
        assert_eq!(f.render(&msgs, true), want(family, 2), "{file}");
    }
    // gemma-3-270m (the base model) has no template: Gemma's hand-written format, with a note.
    let g = GgufFile::open(models::model("GGWEB_GEMMA3", "gemma-3-270m-q4_k_m.gguf")).unwrap();
    let f = ChatFormat::from_gguf(g.header());
    assert_eq!(f.name(), "gemma-fallback");
    assert!(f
        .note()
        .is_some_and(|n| n.contains("no tokenizer.chat_template")));
    // Phi-3's vocabulary: its template writes `<s>`, which llama.cpp's tokenizer adds itself.
    let bytes = std::fs::read(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/fixtures/vocab/ggml-vocab-phi-3.gguf"),
    )
    .unwrap();
    let g = ggweb::gguf::Gguf::parse(&bytes).unwrap();
    let f = ChatFormat::from_gguf(&g);
    assert_eq!(f.name(), "jinja");
    assert_eq!(f.render(&msgs, true), want("phi3", 2));
    assert!(want("phi3", 2).starts_with("<s>"));
    let tok = ggweb::models::tokenizer::Tokenizer::from_gguf(&g).unwrap();
    assert!(tok.add_bos());
    let prompt = f.render_for(&msgs, true, &tok);
    assert_eq!(prompt, want("phi3", 2)["<s>".len()..]);
    let ids = tok.tokenize(&prompt, true, true);
    assert_eq!(ids.iter().filter(|&&t| Some(t) == tok.bos()).count(), 1);
    assert_eq!(ids[0], tok.bos().unwrap());
}
