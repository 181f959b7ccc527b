//! Chat-template detection and rendering: any template text, any messages (roles and contents
//! from the input) renders without a panic, and every message's content appears in the prompt.
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
    let format = ChatFormat::detect(template, arch);
    for gen in [false, true] {
        let prompt = format.render(&messages, gen);
        for m in &messages {
            assert!(
                prompt.contains(m.content.trim()),
                "content dropped from the prompt"
            );
        }
    }
});
