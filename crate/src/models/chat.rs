//! Chat prompt formats read from `tokenizer.chat_template`. The common families are recognised
//! by their markers and rendered directly (no Jinja engine): ChatML (`<|im_start|>`, with the
//! template's default system prompt when it has one), Gemma (`<start_of_turn>`), Llama 3
//! (`<|start_header_id|>`). A model without a template gets its architecture's format.

use crate::gguf::Gguf;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: &str, content: &str) -> Self {
        ChatMessage {
            role: role.to_string(),
            content: content.to_string(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChatFormat {
    /// ChatML, with an optional default system prompt inserted when the first message is not one.
    ChatMl {
        default_system: Option<String>,
    },
    Gemma,
    Llama3,
}

impl ChatFormat {
    /// The format of a model's template (or of its architecture when it has none).
    pub fn detect(template: Option<&str>, arch: Option<&str>) -> ChatFormat {
        match template {
            Some(t) if t.contains("<start_of_turn>") => ChatFormat::Gemma,
            Some(t) if t.contains("<|start_header_id|>") => ChatFormat::Llama3,
            Some(t) if t.contains("<|im_start|>") => ChatFormat::ChatMl {
                default_system: default_system(t),
            },
            _ => match arch {
                Some(a) if a.starts_with("gemma") => ChatFormat::Gemma,
                _ => ChatFormat::ChatMl {
                    default_system: None,
                },
            },
        }
    }

    pub fn from_gguf(g: &Gguf) -> ChatFormat {
        ChatFormat::detect(
            g.get("tokenizer.chat_template").and_then(|v| v.as_str()),
            g.architecture(),
        )
    }

    /// The prompt text for `messages`, ending with the assistant's turn header when
    /// `add_generation_prompt`.
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> String {
        let mut out = String::new();
        match self {
            ChatFormat::ChatMl { default_system } => {
                if let Some(sys) = default_system {
                    if messages.first().is_none_or(|m| m.role != "system") {
                        out += &format!("<|im_start|>system\n{sys}<|im_end|>\n");
                    }
                }
                for m in messages {
                    out += &format!("<|im_start|>{}\n{}<|im_end|>\n", m.role, m.content);
                }
                if add_generation_prompt {
                    out += "<|im_start|>assistant\n";
                }
            }
            ChatFormat::Gemma => {
                // Gemma has no system role: the system text opens the first user turn.
                let mut system = String::new();
                for m in messages {
                    match m.role.as_str() {
                        // Several system messages all reach the next user turn.
                        "system" => system += &format!("{}\n\n", m.content),
                        role => {
                            let role = if role == "assistant" { "model" } else { role };
                            let content = if role == "user" {
                                std::mem::take(&mut system) + &m.content
                            } else {
                                m.content.clone()
                            };
                            out += &format!(
                                "<start_of_turn>{role}\n{}<end_of_turn>\n",
                                content.trim()
                            );
                        }
                    }
                }
                // System text no user turn followed is not dropped: it becomes one.
                if !system.is_empty() {
                    out += &format!("<start_of_turn>user\n{}<end_of_turn>\n", system.trim());
                }
                if add_generation_prompt {
                    out += "<start_of_turn>model\n";
                }
            }
            ChatFormat::Llama3 => {
                for m in messages {
                    out += &format!(
                        "<|start_header_id|>{}<|end_header_id|>\n\n{}<|eot_id|>",
                        m.role,
                        m.content.trim()
                    );
                }
                if add_generation_prompt {
                    out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
                }
            }
        }
        out
    }
}

/// The system prompt a ChatML template inserts by itself, e.g. SmolLM2's.
fn default_system(t: &str) -> Option<String> {
    let start = t.find("<|im_start|>system\n")? + "<|im_start|>system\n".len();
    let end = start + t[start..].find("<|im_end|>")?;
    let s = &t[start..end];
    // Only a literal string, not a Jinja expression.
    (!s.contains("{{") && !s.contains("{%")).then(|| s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMOLLM2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    /// Found by fuzzing (crate/fuzz chat_template): a second system message, or one no user
    /// turn followed, vanished from Gemma prompts.
    #[test]
    fn gemma_keeps_every_system_message() {
        let f = ChatFormat::Gemma;
        let m = [
            ChatMessage::new("system", "A"),
            ChatMessage::new("system", "B"),
            ChatMessage::new("user", "hi"),
            ChatMessage::new("system", "C"),
        ];
        assert_eq!(
            f.render(&m, true),
            "<start_of_turn>user\nA\n\nB\n\nhi<end_of_turn>\n<start_of_turn>user\nC<end_of_turn>\n<start_of_turn>model\n"
        );
    }

    #[test]
    fn smollm2_template_renders_as_transformers() {
        let f = ChatFormat::detect(Some(SMOLLM2), Some("llama"));
        let got = f.render(
            &[ChatMessage::new("user", "What is the capital of France?")],
            true,
        );
        let want = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n";
        assert_eq!(got, want);
        // An explicit system message replaces the default.
        let got = f.render(
            &[
                ChatMessage::new("system", "Be brief."),
                ChatMessage::new("user", "Hi"),
            ],
            false,
        );
        assert_eq!(
            got,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        );
    }

    #[test]
    fn gemma_format() {
        let f = ChatFormat::detect(None, Some("gemma3"));
        let got = f.render(
            &[
                ChatMessage::new("system", "S"),
                ChatMessage::new("user", "Hi"),
                ChatMessage::new("assistant", "Yo"),
            ],
            true,
        );
        assert_eq!(got, "<start_of_turn>user\nS\n\nHi<end_of_turn>\n<start_of_turn>model\nYo<end_of_turn>\n<start_of_turn>model\n");
    }
}
