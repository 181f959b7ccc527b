//! Chat prompts from `tokenizer.chat_template`. The model's own Jinja template is rendered by
//! [`jinja`], as transformers renders it. Hand-written formats remain as the fallback when a
//! model has no template or its template uses a construct the interpreter lacks: ChatML
//! (`<|im_start|>`, with the template's default system prompt when it has one), Gemma
//! (`<start_of_turn>`), Llama 3 (`<|start_header_id|>`), or the architecture's format.

pub mod jinja;

use crate::gguf::Gguf;
use crate::models::tokenizer::Tokenizer;
use jinja::{Template, TemplateError, Value};

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
    /// The model's template, with its special tokens and the format to fall back to when a
    /// conversation reaches a construct the interpreter lacks (or the template rejects it).
    Jinja {
        template: Box<Template>,
        bos_token: Option<String>,
        eos_token: Option<String>,
        fallback: Box<ChatFormat>,
    },
    /// A hand-written format, and why the template was not used.
    Fallback {
        format: Box<ChatFormat>,
        reason: String,
    },
    /// ChatML, with an optional default system prompt inserted when the first message is not one.
    ChatMl {
        default_system: Option<String>,
    },
    Gemma,
    Llama3,
}

impl ChatFormat {
    /// The format of a model's template (or of its architecture when it has none). `bos`/`eos`:
    /// the texts of the model's BOS and EOS tokens (the template's `bos_token`, `eos_token`).
    pub fn detect(template: Option<&str>, arch: Option<&str>) -> ChatFormat {
        Self::detect_with_tokens(template, arch, None, None)
    }

    pub fn detect_with_tokens(
        template: Option<&str>,
        arch: Option<&str>,
        bos: Option<&str>,
        eos: Option<&str>,
    ) -> ChatFormat {
        let fallback = Self::hand_written(template, arch);
        let Some(text) = template else {
            return ChatFormat::Fallback {
                format: Box::new(fallback),
                reason: "the model has no tokenizer.chat_template".into(),
            };
        };
        let parsed = Template::parse(text).and_then(|t| {
            let f = ChatFormat::Jinja {
                template: Box::new(t),
                bos_token: bos.map(String::from),
                eos_token: eos.map(String::from),
                fallback: Box::new(fallback.clone()),
            };
            // A first conversation finds unsupported constructs now rather than mid-chat (a
            // template that rejects it, e.g. one requiring a system prompt, is still usable).
            match f.try_render(&[ChatMessage::new("user", "Hi")], true) {
                Ok(_) | Err(TemplateError::Raised(_)) => Ok(f),
                Err(e) => Err(e),
            }
        });
        match parsed {
            Ok(f) => f,
            Err(e) => ChatFormat::Fallback {
                format: Box::new(fallback),
                reason: e.to_string(),
            },
        }
    }

    /// The hand-written format a template's markers (or the architecture) call for.
    fn hand_written(template: Option<&str>, arch: Option<&str>) -> ChatFormat {
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
        let token = |key: &str| -> Option<&str> {
            let id = g.get(key)?.as_u32()? as usize;
            let tokens = g.get("tokenizer.ggml.tokens")?.as_array()?.as_strings()?;
            tokens.get(id).map(String::as_str)
        };
        ChatFormat::detect_with_tokens(
            g.get("tokenizer.chat_template").and_then(|v| v.as_str()),
            g.architecture(),
            token("tokenizer.ggml.bos_token_id"),
            token("tokenizer.ggml.eos_token_id"),
        )
    }

    /// The name the JS API reports as `chatFormat`: `jinja`, or the hand-written format's name
    /// with `-fallback`.
    pub fn name(&self) -> String {
        match self {
            ChatFormat::Jinja { .. } => "jinja".into(),
            ChatFormat::Fallback { format, .. } => format!("{}-fallback", format.name()),
            ChatFormat::ChatMl { .. } => "chatml".into(),
            ChatFormat::Gemma => "gemma".into(),
            ChatFormat::Llama3 => "llama3".into(),
        }
    }

    /// Why the model's template is not used, when it is not.
    pub fn note(&self) -> Option<&str> {
        match self {
            ChatFormat::Fallback { reason, .. } => Some(reason),
            _ => None,
        }
    }

    /// The template's rendering of `messages`, or its error (a rejected conversation is
    /// [`TemplateError::Raised`]); hand-written formats always succeed.
    pub fn try_render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, TemplateError> {
        let ChatFormat::Jinja {
            template,
            bos_token,
            eos_token,
            ..
        } = self
        else {
            return Ok(self.render(messages, add_generation_prompt));
        };
        let msgs = messages
            .iter()
            .map(|m| {
                Value::dict(vec![
                    ("role", Value::str(&m.role)),
                    ("content", Value::str(&m.content)),
                ])
            })
            .collect();
        // As transformers passes them: the special tokens the model has, no tools or documents.
        let mut vars = vec![
            ("messages", Value::list(msgs)),
            ("add_generation_prompt", Value::Bool(add_generation_prompt)),
            ("tools", Value::None),
            ("documents", Value::None),
        ];
        if let Some(b) = bos_token {
            vars.push(("bos_token", Value::str(b)));
        }
        if let Some(e) = eos_token {
            vars.push(("eos_token", Value::str(e)));
        }
        template.render(vars)
    }

    /// [`ChatFormat::render`] for tokenizing with `add_special`: a leading BOS the template
    /// writes (`{{ bos_token }}`) is left out when `tokenizer` adds one itself, as llama.cpp
    /// does, so the prompt starts with one BOS.
    pub fn render_for(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        tokenizer: &Tokenizer,
    ) -> String {
        let prompt = self.render(messages, add_generation_prompt);
        let bos = tokenizer.bos().and_then(|b| tokenizer.token_text(b));
        match bos {
            Some(b) if tokenizer.add_bos() && !b.is_empty() && prompt.starts_with(b) => {
                prompt[b.len()..].to_string()
            }
            _ => prompt,
        }
    }

    /// The prompt text for `messages`, ending with the assistant's turn header when
    /// `add_generation_prompt`.
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> String {
        let mut out = String::new();
        match self {
            // A conversation the template cannot render (or rejects) gets the fallback format.
            ChatFormat::Jinja { fallback, .. } => {
                return self
                    .try_render(messages, add_generation_prompt)
                    .unwrap_or_else(|_| fallback.render(messages, add_generation_prompt));
            }
            ChatFormat::Fallback { format, .. } => {
                return format.render(messages, add_generation_prompt)
            }
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
