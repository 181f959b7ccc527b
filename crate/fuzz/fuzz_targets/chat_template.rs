//! Chat templates: any template text (the interpreter's lexer, parser and renderer, bounded by
//! its limits), any architecture, any messages (roles and contents from the input) render
//! without a panic or a hang; a hand-written fallback format keeps every message's content.
#![no_main]
use ggweb::models::chat::{ChatFormat, ChatMessage};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.split('\u{1}');
    let template = parts.next();
    let arch = parts.next();
    let roles = ["system", "user", "assistant", "tool"];
    let messages: Vec<ChatMessage> = parts
        .enumerate()
        .map(|(i, c)| {
            let role = c
                .bytes()
                .next()
                .map_or(roles[i % 4], |b| roles[b as usize % 4]);
            ChatMessage::new(role, c)
        })
        .collect();
    let format = ChatFormat::detect_with_tokens(template, arch, Some("<s>"), Some("</s>"));
    for gen in [false, true] {
        // `render` runs the template (`try_render`: it may fail with a typed error) and falls
        // back on failure, so one call covers both without rendering twice.
        let prompt = format.render(&messages, gen);
        if format.name().ends_with("-fallback") {
            for m in &messages {
                assert!(
                    prompt.contains(m.content.trim()),
                    "content dropped from the prompt"
                );
            }
        }
    }
});
