//! The one generation loop, as a state machine over an [`Llm`] session: [`Llm::begin`], then
//! [`Generation::step`] until it returns [`Step::Done`]. The CLI, Rust callers and the wasm
//! bindings all drive it; JavaScript steps it from its event loop, so a page can stop between
//! tokens. Each step samples a token and evaluates it right away (the first step evaluates the
//! prompt); [`Generation::step_async`] is the same step with WebGPU's asynchronous evaluation.

use crate::models::llm::Llm;
use crate::models::sampler::{Sampler, SamplerOptions};
use crate::{Error, Result};

/// Why a generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// `max_tokens` tokens were generated.
    MaxTokens,
    /// The model sampled an end-of-generation token (not part of the output).
    EndOfGeneration,
    /// The KV cache is full.
    ContextFull,
}

impl StopReason {
    /// The JS API's name: "length", "eog" or "context".
    pub fn name(self) -> &'static str {
        match self {
            StopReason::MaxTokens => "length",
            StopReason::EndOfGeneration => "eog",
            StopReason::ContextFull => "context",
        }
    }
}

/// What one step did.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// The prompt was evaluated: `n_evaluated` of its `n_prompt` tokens (the rest came from the
    /// KV cache).
    Prompt { n_prompt: usize, n_evaluated: usize },
    /// A generated token and the text it completes (empty while a UTF-8 character is incomplete).
    Token { id: u32, text: String },
    /// The end; `text` holds bytes still pending (an incomplete character, as U+FFFD).
    Done { reason: StopReason, text: String },
}

/// A generation in progress on one [`Llm`] (see the module docs). Evaluating anything else on
/// that session in between invalidates it: start again with [`Llm::begin`].
pub struct Generation {
    sampler: Sampler,
    prompt: Vec<u32>,
    max_tokens: usize,
    /// The last position's logits; `None` until the prompt is evaluated.
    logits: Option<Vec<f32>>,
    /// The last token could not be evaluated: the next step ends the generation.
    context_full: bool,
    /// Bytes of an incomplete UTF-8 character.
    pending: Vec<u8>,
    ids: Vec<u32>,
    done: Option<StopReason>,
}

/// The evaluation a step needs: the only part the sync and async steps do differently.
enum Eval {
    Prompt,
    Token(u32),
    Nothing,
}

impl Llm {
    /// Start generating up to `max_tokens` tokens after `prompt_ids` (evaluated by the first
    /// step, reusing the cached prefix).
    pub fn begin(
        &self,
        prompt_ids: &[u32],
        max_tokens: usize,
        opts: SamplerOptions,
    ) -> Result<Generation> {
        if prompt_ids.is_empty() {
            return Err(Error::InvalidArgument("empty prompt".into()));
        }
        opts.validate()?;
        let mut sampler = Sampler::new(opts);
        for &t in prompt_ids {
            sampler.accept(t);
        }
        Ok(Generation {
            sampler,
            prompt: prompt_ids.to_vec(),
            max_tokens,
            logits: None,
            context_full: false,
            pending: Vec::new(),
            ids: Vec::new(),
            done: None,
        })
    }
}

impl Generation {
    /// The tokens generated so far.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    pub fn prompt(&self) -> &[u32] {
        &self.prompt
    }

    /// The next step: evaluate the prompt, or sample a token and evaluate it, or end.
    pub fn step(&mut self, llm: &mut Llm) -> Result<Step> {
        let (eval, step) = self.plan(llm);
        let logits = match eval {
            Eval::Prompt => Some(llm.eval_prompt(&self.prompt)?),
            Eval::Token(t) => Some((llm.eval_token(t)?, 1)),
            Eval::Nothing => None,
        };
        Ok(self.complete(step, logits))
    }

    /// [`Generation::step`] for WebGPU in the browser (results are read asynchronously).
    #[cfg(feature = "webgpu")]
    pub async fn step_async(&mut self, llm: &mut Llm) -> Result<Step> {
        let (eval, step) = self.plan(llm);
        let logits = match eval {
            Eval::Prompt => Some(llm.eval_prompt_async(&self.prompt).await?),
            Eval::Token(t) => Some((llm.eval_token_async(t).await?, 1)),
            Eval::Nothing => None,
        };
        Ok(self.complete(step, logits))
    }

    /// Sample (once the prompt is evaluated) and say what to evaluate for the returned step.
    fn plan(&mut self, llm: &Llm) -> (Eval, Step) {
        if let Some(reason) = self.done {
            return (
                Eval::Nothing,
                Step::Done {
                    reason,
                    text: String::new(),
                },
            );
        }
        let Some(logits) = &self.logits else {
            let step = Step::Prompt {
                n_prompt: self.prompt.len(),
                n_evaluated: 0,
            };
            return (Eval::Prompt, step);
        };
        if self.ids.len() >= self.max_tokens {
            return (Eval::Nothing, self.finish(StopReason::MaxTokens));
        }
        if self.context_full {
            return (Eval::Nothing, self.finish(StopReason::ContextFull));
        }
        let id = self.sampler.sample(logits);
        self.sampler.accept(id);
        if llm.tokenizer.is_eog(id) {
            return (Eval::Nothing, self.finish(StopReason::EndOfGeneration));
        }
        self.ids.push(id);
        self.pending
            .extend_from_slice(llm.tokenizer.token_to_piece(id, false));
        let text = take_utf8(&mut self.pending);
        // The last token needs no evaluation; one that does not fit ends the generation next.
        let eval = if self.ids.len() >= self.max_tokens {
            Eval::Nothing
        } else if llm.model.n_past() >= llm.model.n_ctx {
            self.context_full = true;
            Eval::Nothing
        } else {
            Eval::Token(id)
        };
        (eval, Step::Token { id, text })
    }

    /// Take in the evaluation's logits (and, for the prompt, how many tokens it evaluated).
    fn complete(&mut self, step: Step, evaluated: Option<(Vec<f32>, usize)>) -> Step {
        let Some((logits, n)) = evaluated else {
            return step;
        };
        self.logits = Some(logits);
        match step {
            Step::Prompt { n_prompt, .. } => Step::Prompt {
                n_prompt,
                n_evaluated: n,
            },
            other => other,
        }
    }

    fn finish(&mut self, reason: StopReason) -> Step {
        self.done = Some(reason);
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        Step::Done { reason, text }
    }
}

/// The longest valid UTF-8 prefix of `buf`, removed from it (an incomplete character at the end
/// stays for the next piece; invalid bytes become U+FFFD).
fn take_utf8(buf: &mut Vec<u8>) -> String {
    match std::str::from_utf8(buf) {
        Ok(s) => {
            let s = s.to_string();
            buf.clear();
            s
        }
        Err(e) => {
            let valid = e.valid_up_to();
            if e.error_len().is_none() {
                // Incomplete sequence at the end: keep it.
                let s = String::from_utf8_lossy(&buf[..valid]).into_owned();
                buf.drain(..valid);
                s
            } else {
                let s = String::from_utf8_lossy(buf).into_owned();
                buf.clear();
                s
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::take_utf8;

    #[test]
    fn utf8_pieces_wait_for_complete_characters() {
        let mut buf = "a".as_bytes().to_vec();
        buf.extend_from_slice(&"é".as_bytes()[..1]);
        assert_eq!(take_utf8(&mut buf), "a");
        buf.extend_from_slice(&"é".as_bytes()[1..]);
        assert_eq!(take_utf8(&mut buf), "é");
        assert!(buf.is_empty());
        buf.extend_from_slice(&[0xff, b'x']);
        assert_eq!(take_utf8(&mut buf), "\u{fffd}x");
    }
}
