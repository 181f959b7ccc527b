//! A Jinja2 subset for chat templates (`tokenizer.chat_template`), rendering as transformers
//! does: `trim_blocks` and `lstrip_blocks` on, Python's `str()` for output, jinja2's default
//! `Undefined` (prints empty, fails on attribute access), an immutable sandbox (no mutation of
//! lists or dicts; `namespace()` for loop state), `raise_exception`, a JSON `tojson`. Tuples are
//! lists (a printed tuple shows as `[1, 2]`, not `(1, 2)`); there is no `strftime_now` (no clock
//! in wasm), so templates take their own fallback date.
//!
//! The template comes from a downloaded file, so everything is bounded: nesting depth when
//! parsing, macro call depth, loop iterations and evaluation steps, the size of every value
//! and of the output. Exceeding a bound, a construct outside the subset or a syntax error is a
//! [`TemplateError`], never a panic or a hang.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::rc::Rc;
use std::sync::Arc;

/// Deepest nesting of expressions and blocks the parser accepts (the renderer recurses as deep).
const MAX_DEPTH: usize = 48;
/// Deepest macro call chain.
const MAX_CALL_DEPTH: usize = 8;
/// Evaluation steps (expression nodes, loop iterations, and one per 64 bytes built).
#[cfg(not(fuzzing))]
const MAX_STEPS: u64 = 10_000_000;
/// Under the fuzzer the same bound, 100× lower: inputs that loop up to it then cost about a
/// millisecond instead of a tenth of a second, so they no longer take over a long run (session
/// 13's fell from ~7,500 to ~100 executions/s once its corpus held many). Same code paths.
#[cfg(fuzzing)]
const MAX_STEPS: u64 = 100_000;
/// Largest string or list any expression may build, and largest output (bytes or items).
const MAX_SIZE: usize = 16 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplateError {
    /// The text is not a template this parser reads (`at`: byte offset).
    Syntax { at: usize, msg: String },
    /// A filter, test, method or statement outside the subset.
    Unsupported(String),
    /// An evaluation error (a type error, an undefined attribute, …).
    Runtime(String),
    /// The template called `raise_exception(msg)`: it rejects this conversation.
    Raised(String),
    /// A bound on depth, steps or size was exceeded.
    Limit(&'static str),
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TemplateError::Syntax { at, msg } => {
                write!(f, "template syntax error at byte {at}: {msg}")
            }
            TemplateError::Unsupported(s) => write!(f, "template uses unsupported {s}"),
            TemplateError::Runtime(s) => write!(f, "template error: {s}"),
            TemplateError::Raised(s) => write!(f, "template raised: {s}"),
            TemplateError::Limit(s) => write!(f, "template exceeds the {s} limit"),
        }
    }
}

impl std::error::Error for TemplateError {}

impl From<TemplateError> for crate::Error {
    fn from(e: TemplateError) -> Self {
        crate::Error::InvalidArgument(e.to_string())
    }
}

type Res<T> = std::result::Result<T, TemplateError>;
/// Insertion-ordered string-keyed entries (Python dicts and namespaces).
type Entries = Vec<(Rc<str>, Value)>;
/// Evaluated call arguments: positional, keyword.
type CallArgs = (Vec<Value>, Vec<(String, Value)>);
/// The block tag that ended a body: its keyword, tokens and offset.
type EndTag = Option<(String, Vec<Tok>, usize)>;

fn rt<T>(msg: impl Into<String>) -> Res<T> {
    Err(TemplateError::Runtime(msg.into()))
}

fn unsupported<T>(msg: impl Into<String>) -> Res<T> {
    Err(TemplateError::Unsupported(msg.into()))
}

// ---------------------------------------------------------------------------------------------
// Lexer: the template splits into text and tags; tags into expression tokens.

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Name(String),
    Str(String),
    Int(i64),
    Float(f64),
    Op(&'static str),
}

#[derive(Debug)]
enum Seg {
    Text(String),
    Var(Vec<Tok>, usize),
    Block(Vec<Tok>, usize),
}

const OPS: [&str; 24] = [
    "**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">", "(", ")", "[", "]",
    "{", "}", ",", ".", ":", "|",
];

fn lex(src: &str) -> Res<Vec<Seg>> {
    let b = src.as_bytes();
    let mut segs = Vec::new();
    let mut i = 0;
    // Whether the previous tag's match ended with a newline (lstrip_blocks looks at it when the
    // text before the next tag has none); the template's start counts as a line start.
    let mut line_starting = true;
    loop {
        let open = (i..b.len().saturating_sub(1))
            .find(|&j| b[j] == b'{' && matches!(b[j + 1], b'{' | b'%' | b'#'));
        let Some(j) = open else {
            if i < b.len() {
                segs.push(Seg::Text(src[i..].to_string()));
            }
            return Ok(segs);
        };
        let kind = b[j + 1];
        let modifier = b.get(j + 2).copied();
        let mut pre = &src[i..j];
        if modifier == Some(b'-') {
            pre = pre.trim_end();
        } else if kind != b'{' && modifier != Some(b'+') {
            // lstrip_blocks: only whitespace between the line start and a block or comment tag.
            let ls = pre.rfind('\n').map_or(0, |p| p + 1);
            if (ls > 0 || line_starting) && pre[ls..].chars().all(|c| c.is_whitespace()) {
                pre = &pre[..ls];
            }
        }
        if !pre.is_empty() {
            segs.push(Seg::Text(pre.to_string()));
        }
        let mut k = j + 2 + usize::from(matches!(modifier, Some(b'-' | b'+')));
        let strip_after;
        if kind == b'#' {
            let end = src[k..].find("#}").ok_or(TemplateError::Syntax {
                at: j,
                msg: "unclosed comment".into(),
            })? + k;
            strip_after = end > k && b[end - 1] == b'-';
            k = end + 2;
        } else {
            let close: &[u8] = if kind == b'{' { b"}}" } else { b"%}" };
            let mut toks = Vec::new();
            loop {
                while k < b.len() && b[k].is_ascii_whitespace() {
                    k += 1;
                }
                if k >= b.len() {
                    return Err(TemplateError::Syntax {
                        at: j,
                        msg: "unclosed tag".into(),
                    });
                }
                if b[k..].starts_with(close) {
                    strip_after = false;
                    k += 2;
                    break;
                }
                if b[k] == b'-' && b[k + 1..].starts_with(close) {
                    strip_after = true;
                    k += 3;
                    break;
                }
                let (t, next) = lex_token(src, k)?;
                toks.push(t);
                k = next;
            }
            segs.push(if kind == b'{' {
                Seg::Var(toks, j)
            } else {
                Seg::Block(toks, j)
            });
        }
        let start = k;
        if strip_after {
            while k < b.len() && (b[k] as char).is_ascii_whitespace() {
                k += 1;
            }
            // Non-ASCII whitespace too, as Python's `\s` does.
            let rest = src[k..].trim_start();
            k = src.len() - rest.len();
        } else if kind != b'{' && b.get(k) == Some(&b'\n') {
            // trim_blocks: the first newline after a block or comment tag.
            k += 1;
        }
        line_starting = k > start && b[k - 1] == b'\n';
        i = k;
    }
}

fn lex_token(src: &str, k: usize) -> Res<(Tok, usize)> {
    let b = src.as_bytes();
    let c = b[k];
    if c == b'\'' || c == b'"' {
        return lex_string(src, k);
    }
    if c.is_ascii_digit() {
        let mut e = k;
        while e < b.len() && (b[e].is_ascii_digit() || b[e] == b'_') {
            e += 1;
        }
        let mut float = false;
        if e + 1 < b.len() && b[e] == b'.' && b[e + 1].is_ascii_digit() {
            float = true;
            e += 1;
            while e < b.len() && b[e].is_ascii_digit() {
                e += 1;
            }
        }
        if e < b.len() && (b[e] == b'e' || b[e] == b'E') {
            let mut f = e + 1;
            if f < b.len() && (b[f] == b'+' || b[f] == b'-') {
                f += 1;
            }
            if f < b.len() && b[f].is_ascii_digit() {
                float = true;
                e = f;
                while e < b.len() && b[e].is_ascii_digit() {
                    e += 1;
                }
            }
        }
        let text: String = src[k..e].chars().filter(|&c| c != '_').collect();
        let bad = || TemplateError::Syntax {
            at: k,
            msg: format!("bad number {text:?}"),
        };
        let tok = if float {
            Tok::Float(text.parse().map_err(|_| bad())?)
        } else {
            Tok::Int(text.parse().map_err(|_| bad())?)
        };
        return Ok((tok, e));
    }
    if c == b'_' || c.is_ascii_alphabetic() {
        let mut e = k;
        while e < b.len() && (b[e] == b'_' || b[e].is_ascii_alphanumeric()) {
            e += 1;
        }
        return Ok((Tok::Name(src[k..e].to_string()), e));
    }
    for op in OPS {
        if b[k..].starts_with(op.as_bytes()) {
            return Ok((Tok::Op(op), k + op.len()));
        }
    }
    if c == b'=' {
        return Ok((Tok::Op("="), k + 1));
    }
    Err(TemplateError::Syntax {
        at: k,
        msg: format!(
            "unexpected character {:?}",
            src[k..].chars().next().unwrap_or(' ')
        ),
    })
}

/// A string literal with Python's escapes (`\n`, `\t`, `\\`, `\'`, `\"`, `\xHH`, `\uHHHH`, …).
fn lex_string(src: &str, k: usize) -> Res<(Tok, usize)> {
    let quote = src.as_bytes()[k] as char;
    let mut out = String::new();
    let mut it = src[k + 1..].char_indices();
    let bad = |msg: &str| TemplateError::Syntax {
        at: k,
        msg: msg.into(),
    };
    while let Some((p, c)) = it.next() {
        if c == quote {
            return Ok((Tok::Str(out), k + 1 + p + 1));
        }
        if c != '\\' {
            out.push(if c == '\r' { '\n' } else { c });
            continue;
        }
        let (_, e) = it.next().ok_or_else(|| bad("unclosed string"))?;
        let mut hex = |n: usize| -> Res<char> {
            let mut v = 0u32;
            for _ in 0..n {
                let (_, h) = it.next().ok_or_else(|| bad("short escape"))?;
                v = v * 16 + h.to_digit(16).ok_or_else(|| bad("bad hex escape"))?;
            }
            char::from_u32(v).ok_or_else(|| bad("bad code point"))
        };
        match e {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            '0' => out.push('\0'),
            'a' => out.push('\x07'),
            'b' => out.push('\x08'),
            'f' => out.push('\x0c'),
            'v' => out.push('\x0b'),
            '\\' | '\'' | '"' => out.push(e),
            '\n' => {}
            'x' => out.push(hex(2)?),
            'u' => out.push(hex(4)?),
            'U' => out.push(hex(8)?),
            other => {
                // Python keeps an unknown escape as it is.
                out.push('\\');
                out.push(other);
            }
        }
    }
    Err(bad("unclosed string"))
}

// ---------------------------------------------------------------------------------------------
// Syntax tree.

#[derive(Debug, Clone)]
enum Expr {
    Lit(Lit),
    Name(String),
    List(Vec<Expr>),
    Dict(Vec<(Expr, Expr)>),
    Attr(Box<Expr>, String),
    Index(Box<Expr>, Box<Expr>),
    Slice(Box<Expr>, [Option<Box<Expr>>; 3]),
    Call(Box<Expr>, Args),
    Filter(Box<Expr>, String, Args),
    Test(Box<Expr>, String, Args, bool),
    Neg(Box<Expr>),
    Not(Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Bin(&'static str, Box<Expr>, Box<Expr>),
    /// `a < b < c`: every adjacent pair.
    Compare(Box<Expr>, Vec<(&'static str, Expr)>),
    Cond(Box<Expr>, Box<Expr>, Option<Box<Expr>>),
}

#[derive(Debug, Clone)]
enum Lit {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Arc<str>),
}

#[derive(Debug, Clone, Default)]
struct Args {
    pos: Vec<Expr>,
    kw: Vec<(String, Expr)>,
}

#[derive(Debug, Clone)]
enum Node {
    Text(String),
    Out(Expr),
    If(Vec<(Expr, Vec<Node>)>, Vec<Node>),
    For(Box<ForLoop>),
    Set(SetTarget, Expr),
    SetBlock(String, Vec<Node>),
    Macro(Arc<MacroDef>),
    Break,
    Continue,
}

#[derive(Debug, Clone)]
struct ForLoop {
    targets: Vec<String>,
    iter: Expr,
    cond: Option<Expr>,
    body: Vec<Node>,
    else_body: Vec<Node>,
}

#[derive(Debug, Clone)]
enum SetTarget {
    Name(String),
    Attr(String, String),
}

#[derive(Debug)]
pub(crate) struct MacroDef {
    name: String,
    params: Vec<(String, Option<Expr>)>,
    body: Vec<Node>,
}

/// A parsed template.
#[derive(Debug, Clone)]
pub struct Template {
    source: String,
    body: Arc<Vec<Node>>,
}

// Templates compare by their text (the format is a value of `ChatFormat`).
impl PartialEq for Template {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}
impl Eq for Template {}

// ---------------------------------------------------------------------------------------------
// Parser.

struct Parser<'a> {
    toks: &'a [Tok],
    pos: usize,
    at: usize,
    depth: usize,
}

impl<'a> Parser<'a> {
    fn new(toks: &'a [Tok], at: usize, depth: usize) -> Self {
        Parser {
            toks,
            pos: 0,
            at,
            depth,
        }
    }

    fn err<T>(&self, msg: impl Into<String>) -> Res<T> {
        Err(TemplateError::Syntax {
            at: self.at,
            msg: msg.into(),
        })
    }

    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos)
    }

    fn is_op(&self, op: &str) -> bool {
        matches!(self.peek(), Some(Tok::Op(o)) if *o == op)
    }

    fn is_name(&self, n: &str) -> bool {
        matches!(self.peek(), Some(Tok::Name(x)) if x == n)
    }

    fn eat_op(&mut self, op: &str) -> bool {
        let hit = self.is_op(op);
        self.pos += usize::from(hit);
        hit
    }

    fn eat_name(&mut self, n: &str) -> bool {
        let hit = self.is_name(n);
        self.pos += usize::from(hit);
        hit
    }

    fn expect_op(&mut self, op: &str) -> Res<()> {
        if self.eat_op(op) {
            Ok(())
        } else {
            self.err(format!("expected '{op}'"))
        }
    }

    fn name(&mut self) -> Res<String> {
        match self.peek() {
            Some(Tok::Name(n)) => {
                let n = n.clone();
                self.pos += 1;
                Ok(n)
            }
            _ => self.err("expected a name"),
        }
    }

    fn end(&self) -> Res<()> {
        if self.pos == self.toks.len() {
            Ok(())
        } else {
            self.err(format!("unexpected {:?}", self.toks[self.pos]))
        }
    }

    fn enter(&mut self) -> Res<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(TemplateError::Limit("nesting depth"));
        }
        Ok(())
    }

    fn expr(&mut self) -> Res<Expr> {
        self.enter()?;
        let mut e = self.or()?;
        while self.eat_name("if") {
            let cond = self.or()?;
            let other = if self.eat_name("else") {
                Some(Box::new(self.expr()?))
            } else {
                None
            };
            e = Expr::Cond(Box::new(cond), Box::new(e), other);
        }
        self.depth -= 1;
        Ok(e)
    }

    fn or(&mut self) -> Res<Expr> {
        let mut e = self.and()?;
        while self.eat_name("or") {
            e = Expr::Or(Box::new(e), Box::new(self.and()?));
        }
        Ok(e)
    }

    fn and(&mut self) -> Res<Expr> {
        let mut e = self.not()?;
        while self.eat_name("and") {
            e = Expr::And(Box::new(e), Box::new(self.not()?));
        }
        Ok(e)
    }

    fn not(&mut self) -> Res<Expr> {
        if self.eat_name("not") {
            self.enter()?;
            let e = Expr::Not(Box::new(self.not()?));
            self.depth -= 1;
            return Ok(e);
        }
        self.compare()
    }

    fn compare(&mut self) -> Res<Expr> {
        let first = self.math1()?;
        let mut rest = Vec::new();
        loop {
            let op = match self.peek() {
                Some(Tok::Op(o)) if matches!(*o, "==" | "!=" | "<" | ">" | "<=" | ">=") => *o,
                Some(Tok::Name(n)) if n == "in" => "in",
                Some(Tok::Name(n))
                    if n == "not"
                        && matches!(self.toks.get(self.pos + 1), Some(Tok::Name(m)) if m == "in") =>
                {
                    self.pos += 1;
                    "not in"
                }
                _ => break,
            };
            self.pos += 1;
            rest.push((op, self.math1()?));
        }
        Ok(if rest.is_empty() {
            first
        } else {
            Expr::Compare(Box::new(first), rest)
        })
    }

    fn math1(&mut self) -> Res<Expr> {
        let mut e = self.concat()?;
        loop {
            let op = if self.eat_op("+") {
                "+"
            } else if self.eat_op("-") {
                "-"
            } else {
                return Ok(e);
            };
            e = Expr::Bin(op, Box::new(e), Box::new(self.concat()?));
        }
    }

    fn concat(&mut self) -> Res<Expr> {
        let mut e = self.math2()?;
        while self.eat_op("~") {
            e = Expr::Bin("~", Box::new(e), Box::new(self.math2()?));
        }
        Ok(e)
    }

    fn math2(&mut self) -> Res<Expr> {
        let mut e = self.pow()?;
        loop {
            let op = match self.peek() {
                Some(Tok::Op(o)) if matches!(*o, "*" | "/" | "//" | "%") => *o,
                _ => return Ok(e),
            };
            self.pos += 1;
            e = Expr::Bin(op, Box::new(e), Box::new(self.pow()?));
        }
    }

    fn pow(&mut self) -> Res<Expr> {
        let mut e = self.unary(true)?;
        while self.eat_op("**") {
            e = Expr::Bin("**", Box::new(e), Box::new(self.unary(true)?));
        }
        Ok(e)
    }

    fn unary(&mut self, with_filter: bool) -> Res<Expr> {
        self.enter()?;
        let mut e = if self.eat_op("-") {
            Expr::Neg(Box::new(self.unary(false)?))
        } else if self.eat_op("+") {
            self.unary(false)?
        } else {
            self.primary()?
        };
        e = self.postfix(e)?;
        if with_filter {
            e = self.filters(e)?;
        }
        self.depth -= 1;
        Ok(e)
    }

    fn primary(&mut self) -> Res<Expr> {
        let Some(t) = self.peek().cloned() else {
            return self.err("expected an expression");
        };
        self.pos += 1;
        Ok(match t {
            Tok::Name(n) => match n.as_str() {
                "true" | "True" => Expr::Lit(Lit::Bool(true)),
                "false" | "False" => Expr::Lit(Lit::Bool(false)),
                "none" | "None" => Expr::Lit(Lit::None),
                _ => Expr::Name(n),
            },
            Tok::Str(mut s) => {
                // Adjacent literals concatenate, as in Python.
                while let Some(Tok::Str(more)) = self.peek() {
                    s += more;
                    self.pos += 1;
                }
                Expr::Lit(Lit::Str(s.into()))
            }
            Tok::Int(i) => Expr::Lit(Lit::Int(i)),
            Tok::Float(f) => Expr::Lit(Lit::Float(f)),
            Tok::Op("(") => {
                if self.eat_op(")") {
                    return Ok(Expr::List(Vec::new()));
                }
                let e = self.expr()?;
                if self.is_op(",") {
                    let mut items = vec![e];
                    while self.eat_op(",") && !self.is_op(")") {
                        items.push(self.expr()?);
                    }
                    self.expect_op(")")?;
                    return Ok(Expr::List(items));
                }
                self.expect_op(")")?;
                e
            }
            Tok::Op("[") => {
                let mut items = Vec::new();
                while !self.eat_op("]") {
                    items.push(self.expr()?);
                    if !self.eat_op(",") {
                        self.expect_op("]")?;
                        break;
                    }
                }
                Expr::List(items)
            }
            Tok::Op("{") => {
                let mut items = Vec::new();
                while !self.eat_op("}") {
                    let k = self.expr()?;
                    self.expect_op(":")?;
                    items.push((k, self.expr()?));
                    if !self.eat_op(",") {
                        self.expect_op("}")?;
                        break;
                    }
                }
                Expr::Dict(items)
            }
            other => return self.err(format!("unexpected {other:?}")),
        })
    }

    fn postfix(&mut self, mut e: Expr) -> Res<Expr> {
        loop {
            if self.eat_op(".") {
                let name = match self.peek() {
                    Some(Tok::Name(n)) => n.clone(),
                    Some(Tok::Int(i)) => i.to_string(),
                    _ => return self.err("expected an attribute name"),
                };
                self.pos += 1;
                e = Expr::Attr(Box::new(e), name);
            } else if self.eat_op("[") {
                e = self.subscript(e)?;
            } else if self.eat_op("(") {
                e = Expr::Call(Box::new(e), self.args()?);
            } else {
                return Ok(e);
            }
        }
    }

    fn subscript(&mut self, e: Expr) -> Res<Expr> {
        let mut parts: [Option<Box<Expr>>; 3] = [None, None, None];
        let mut colons = 0;
        loop {
            if self.eat_op("]") {
                break;
            }
            if self.eat_op(":") {
                colons += 1;
                if colons > 2 {
                    return self.err("bad slice");
                }
                continue;
            }
            if parts[colons].is_some() {
                return self.err("expected ']'");
            }
            parts[colons] = Some(Box::new(self.expr()?));
        }
        if colons == 0 {
            match parts[0].take() {
                Some(i) => Ok(Expr::Index(Box::new(e), i)),
                None => self.err("empty subscript"),
            }
        } else {
            Ok(Expr::Slice(Box::new(e), parts))
        }
    }

    /// Call arguments after '(' up to and including ')'.
    fn args(&mut self) -> Res<Args> {
        let mut a = Args::default();
        while !self.eat_op(")") {
            let kw = matches!(self.peek(), Some(Tok::Name(_)))
                && matches!(self.toks.get(self.pos + 1), Some(Tok::Op("=")));
            if kw {
                let n = self.name()?;
                self.pos += 1;
                a.kw.push((n, self.expr()?));
            } else {
                a.pos.push(self.expr()?);
            }
            if !self.eat_op(",") {
                self.expect_op(")")?;
                break;
            }
        }
        Ok(a)
    }

    fn filters(&mut self, mut e: Expr) -> Res<Expr> {
        loop {
            if self.eat_op("|") {
                let mut name = self.name()?;
                while self.eat_op(".") {
                    name = name + "." + &self.name()?;
                }
                let args = if self.eat_op("(") {
                    self.args()?
                } else {
                    Args::default()
                };
                e = Expr::Filter(Box::new(e), name, args);
            } else if self.eat_name("is") {
                let negated = self.eat_name("not");
                let name = self.name()?;
                let args = if self.eat_op("(") {
                    self.args()?
                } else if self.test_arg_follows() {
                    Args {
                        pos: vec![self.unary(false)?],
                        kw: Vec::new(),
                    }
                } else {
                    Args::default()
                };
                e = Expr::Test(Box::new(e), name, args, negated);
            } else {
                return Ok(e);
            }
        }
    }

    /// `x is divisibleby 3`, `x is sameas none`: a bare argument after the test name.
    fn test_arg_follows(&self) -> bool {
        match self.peek() {
            Some(Tok::Name(n)) => !matches!(
                n.as_str(),
                "else" | "or" | "and" | "if" | "is" | "in" | "not" | "recursive"
            ),
            Some(Tok::Str(_) | Tok::Int(_) | Tok::Float(_)) => true,
            Some(Tok::Op(o)) => matches!(*o, "[" | "{"),
            None => false,
        }
    }
}

/// Parses the segments into nodes, up to a block tag whose first word is in `until`.
struct BodyParser {
    segs: std::vec::IntoIter<Seg>,
    depth: usize,
}

impl BodyParser {
    fn body(&mut self, until: &[&str]) -> Res<(Vec<Node>, EndTag)> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(TemplateError::Limit("nesting depth"));
        }
        let mut nodes = Vec::new();
        while let Some(seg) = self.segs.next() {
            match seg {
                Seg::Text(t) => nodes.push(Node::Text(t)),
                Seg::Var(toks, at) => {
                    let mut p = Parser::new(&toks, at, self.depth);
                    let e = p.expr()?;
                    p.end()?;
                    nodes.push(Node::Out(e));
                }
                Seg::Block(toks, at) => {
                    let Some(Tok::Name(kw)) = toks.first() else {
                        return Err(TemplateError::Syntax {
                            at,
                            msg: "expected a statement".into(),
                        });
                    };
                    let kw = kw.clone();
                    if until.contains(&kw.as_str()) {
                        self.depth -= 1;
                        return Ok((nodes, Some((kw, toks, at))));
                    }
                    nodes.push(self.statement(&kw, &toks, at)?);
                }
            }
        }
        if until.is_empty() {
            self.depth -= 1;
            return Ok((nodes, None));
        }
        Err(TemplateError::Syntax {
            at: usize::MAX,
            msg: format!("missing {{% {} %}}", until.join(" / ")),
        })
    }

    fn statement(&mut self, kw: &str, toks: &[Tok], at: usize) -> Res<Node> {
        let mut p = Parser::new(&toks[1..], at, self.depth);
        match kw {
            "if" => {
                let mut arms = Vec::new();
                let mut cond = p.expr()?;
                p.end()?;
                loop {
                    let (body, end) = self.body(&["elif", "else", "endif"])?;
                    arms.push((cond, body));
                    let Some((k, t, at)) = end else {
                        unreachable!("body() with a terminator returns it or an error")
                    };
                    match k.as_str() {
                        "elif" => {
                            let mut q = Parser::new(&t[1..], at, self.depth);
                            cond = q.expr()?;
                            q.end()?;
                        }
                        "else" => {
                            let (els, _) = self.body(&["endif"])?;
                            return Ok(Node::If(arms, els));
                        }
                        _ => return Ok(Node::If(arms, Vec::new())),
                    }
                }
            }
            "for" => {
                let mut targets = vec![p.name()?];
                while p.eat_op(",") {
                    targets.push(p.name()?);
                }
                if !p.eat_name("in") {
                    return p.err("expected 'in'");
                }
                // The iterable stops before a loop filter: parse it without the conditional.
                let iter = p.or()?;
                let cond = if p.eat_name("if") {
                    Some(p.or()?)
                } else {
                    None
                };
                if p.eat_name("recursive") {
                    return unsupported("recursive for loops");
                }
                p.end()?;
                let (body, end) = self.body(&["else", "endfor"])?;
                let else_body = match end {
                    Some((k, _, _)) if k == "else" => self.body(&["endfor"])?.0,
                    _ => Vec::new(),
                };
                Ok(Node::For(Box::new(ForLoop {
                    targets,
                    iter,
                    cond,
                    body,
                    else_body,
                })))
            }
            "set" => {
                let name = p.name()?;
                let target = if p.eat_op(".") {
                    SetTarget::Attr(name, p.name()?)
                } else {
                    SetTarget::Name(name)
                };
                if p.peek().is_none() {
                    let SetTarget::Name(name) = target else {
                        return p.err("a block set takes a plain name");
                    };
                    let (body, _) = self.body(&["endset"])?;
                    return Ok(Node::SetBlock(name, body));
                }
                if p.is_op(",") {
                    return unsupported("tuple assignment in set");
                }
                p.expect_op("=")?;
                let e = p.expr()?;
                p.end()?;
                Ok(Node::Set(target, e))
            }
            "macro" => {
                let name = p.name()?;
                p.expect_op("(")?;
                let mut params = Vec::new();
                while !p.eat_op(")") {
                    let n = p.name()?;
                    let default = if p.eat_op("=") { Some(p.expr()?) } else { None };
                    params.push((n, default));
                    if !p.eat_op(",") {
                        p.expect_op(")")?;
                        break;
                    }
                }
                p.end()?;
                let (body, _) = self.body(&["endmacro"])?;
                Ok(Node::Macro(Arc::new(MacroDef { name, params, body })))
            }
            "break" | "continue" => {
                p.end()?;
                Ok(if kw == "break" {
                    Node::Break
                } else {
                    Node::Continue
                })
            }
            // transformers' `{% generation %}` marks the assistant's tokens; it renders its body.
            "generation" => {
                p.end()?;
                let (body, _) = self.body(&["endgeneration"])?;
                Ok(Node::If(
                    vec![(Expr::Lit(Lit::Bool(true)), body)],
                    Vec::new(),
                ))
            }
            other if other.starts_with("end") || other == "elif" || other == "else" => {
                p.err(format!("unexpected {{% {other} %}}"))
            }
            other => unsupported(format!("statement {{% {other} %}}")),
        }
    }
}

impl Template {
    pub fn parse(source: &str) -> Result<Template, TemplateError> {
        let segs = lex(source)?;
        let mut bp = BodyParser {
            segs: segs.into_iter(),
            depth: 0,
        };
        let (body, _) = bp.body(&[])?;
        Ok(Template {
            source: source.to_string(),
            body: Arc::new(body),
        })
    }

    pub fn source(&self) -> &str {
        &self.source
    }
}

// ---------------------------------------------------------------------------------------------
// Values.

#[derive(Clone, Debug)]
pub(crate) enum Value {
    Undefined,
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Rc<str>),
    List(Rc<Vec<Value>>),
    /// Insertion-ordered, as Python's dict.
    Dict(Rc<Vec<(Rc<str>, Value)>>),
    Namespace(Rc<RefCell<Entries>>),
    Macro(Arc<MacroDef>),
    Builtin(&'static str),
}

impl Value {
    pub(crate) fn str(s: &str) -> Value {
        Value::Str(s.into())
    }

    pub(crate) fn dict(items: Vec<(&str, Value)>) -> Value {
        Value::Dict(Rc::new(
            items.into_iter().map(|(k, v)| (k.into(), v)).collect(),
        ))
    }

    pub(crate) fn list(items: Vec<Value>) -> Value {
        Value::List(Rc::new(items))
    }

    fn truthy(&self) -> bool {
        match self {
            Value::Undefined | Value::None => false,
            Value::Bool(b) => *b,
            Value::Int(i) => *i != 0,
            Value::Float(f) => *f != 0.0,
            Value::Str(s) => !s.is_empty(),
            Value::List(l) => !l.is_empty(),
            Value::Dict(d) => !d.is_empty(),
            Value::Namespace(_) | Value::Macro(_) | Value::Builtin(_) => true,
        }
    }

    fn type_name(&self) -> &'static str {
        match self {
            Value::Undefined => "undefined",
            Value::None => "none",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "string",
            Value::List(_) => "list",
            Value::Dict(_) => "dict",
            Value::Namespace(_) => "namespace",
            Value::Macro(_) | Value::Builtin(_) => "function",
        }
    }

    fn as_num(&self) -> Option<f64> {
        match self {
            Value::Int(i) => Some(*i as f64),
            Value::Float(f) => Some(*f),
            Value::Bool(b) => Some(f64::from(u8::from(*b))),
            _ => None,
        }
    }

    fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            Value::Bool(b) => Some(i64::from(*b)),
            _ => None,
        }
    }

    /// Python's `str()`.
    fn to_str(&self) -> String {
        match self {
            Value::Undefined => String::new(),
            Value::Str(s) => s.to_string(),
            _ => {
                let mut out = String::new();
                self.repr(&mut out, false);
                out
            }
        }
    }

    /// Python's `repr()` (`top`: `str()` of strings, which print bare).
    fn repr(&self, out: &mut String, quote: bool) {
        match self {
            Value::Undefined => {}
            Value::None => out.push_str("None"),
            Value::Bool(b) => out.push_str(if *b { "True" } else { "False" }),
            Value::Int(i) => out.push_str(&i.to_string()),
            Value::Float(f) => out.push_str(&py_float(*f)),
            Value::Str(s) if !quote => out.push_str(s),
            Value::Str(s) => py_str_repr(s, out),
            Value::List(l) => {
                out.push('[');
                for (i, v) in l.iter().enumerate() {
                    // Past the size limit the caller fails anyway (a list may repeat a big value).
                    if out.len() > MAX_SIZE {
                        return;
                    }
                    if i > 0 {
                        out.push_str(", ");
                    }
                    v.repr(out, true);
                }
                out.push(']');
            }
            Value::Dict(d) => {
                out.push('{');
                for (i, (k, v)) in d.iter().enumerate() {
                    if out.len() > MAX_SIZE {
                        return;
                    }
                    if i > 0 {
                        out.push_str(", ");
                    }
                    py_str_repr(k, out);
                    out.push_str(": ");
                    v.repr(out, true);
                }
                out.push('}');
            }
            Value::Namespace(_) => out.push_str("<Namespace>"),
            Value::Macro(m) => out.push_str(&format!("<Macro '{}'>", m.name)),
            Value::Builtin(n) => out.push_str(&format!("<function {n}>")),
        }
    }

    /// The items a `for` loop visits: a list's items, a string's characters, a dict's keys.
    fn iter_items(&self) -> Res<Vec<Value>> {
        match self {
            Value::Undefined => Ok(Vec::new()),
            Value::List(l) => Ok(l.as_ref().clone()),
            Value::Str(s) => Ok(s
                .chars()
                .map(|c| Value::Str(c.to_string().into()))
                .collect()),
            Value::Dict(d) => Ok(d.iter().map(|(k, _)| Value::Str(k.clone())).collect()),
            other => rt(format!("{} is not iterable", other.type_name())),
        }
    }

    fn len(&self) -> Res<usize> {
        match self {
            Value::Undefined => Ok(0),
            Value::Str(s) => Ok(s.chars().count()),
            Value::List(l) => Ok(l.len()),
            Value::Dict(d) => Ok(d.len()),
            other => rt(format!("{} has no length", other.type_name())),
        }
    }
}

fn py_float(f: f64) -> String {
    if f.is_nan() {
        "nan".into()
    } else if f.is_infinite() {
        if f > 0.0 { "inf" } else { "-inf" }.into()
    } else if f == f.trunc() && f.abs() < 1e16 {
        format!("{f:.1}")
    } else {
        format!("{f}")
    }
}

fn py_str_repr(s: &str, out: &mut String) {
    let q = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(q);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == q => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push(q);
}

fn values_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Undefined, Value::Undefined) | (Value::None, Value::None) => true,
        (Value::Str(x), Value::Str(y)) => x == y,
        (Value::List(x), Value::List(y)) => {
            x.len() == y.len() && x.iter().zip(y.iter()).all(|(p, q)| values_eq(p, q))
        }
        (Value::Dict(x), Value::Dict(y)) => {
            x.len() == y.len()
                && x.iter().all(|(k, v)| {
                    y.iter()
                        .find(|(k2, _)| k2 == k)
                        .is_some_and(|(_, v2)| values_eq(v, v2))
                })
        }
        (Value::Namespace(x), Value::Namespace(y)) => Rc::ptr_eq(x, y),
        (Value::Macro(x), Value::Macro(y)) => Arc::ptr_eq(x, y),
        (Value::Builtin(x), Value::Builtin(y)) => x == y,
        _ => match (a.as_num(), b.as_num()) {
            (Some(x), Some(y)) => x == y,
            _ => false,
        },
    }
}

/// JSON as Python's `json.dumps(x, ensure_ascii=False, indent=indent)` writes it.
fn to_json(v: &Value, indent: Option<usize>, level: usize, out: &mut String) -> Res<()> {
    if level > MAX_DEPTH {
        return Err(TemplateError::Limit("nesting depth"));
    }
    let newline = |out: &mut String, level: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.extend(std::iter::repeat_n(' ', n * level));
        }
    };
    let item_sep = if indent.is_some() { "," } else { ", " };
    match v {
        Value::None => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(i) => out.push_str(&i.to_string()),
        Value::Float(f) if f.is_finite() => out.push_str(&py_float(*f)),
        Value::Float(f) => out.push_str(if f.is_nan() {
            "NaN"
        } else if *f > 0.0 {
            "Infinity"
        } else {
            "-Infinity"
        }),
        Value::Str(s) => json_str(s, out),
        Value::List(l) => {
            if l.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, x) in l.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, level + 1);
                to_json(x, indent, level + 1, out)?;
            }
            newline(out, level);
            out.push(']');
        }
        Value::Dict(d) => {
            if d.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, (k, x)) in d.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, level + 1);
                json_str(k, out);
                out.push_str(": ");
                to_json(x, indent, level + 1, out)?;
            }
            newline(out, level);
            out.push('}');
        }
        other => return rt(format!("{} is not JSON serializable", other.type_name())),
    }
    if out.len() > MAX_SIZE {
        return Err(TemplateError::Limit("value size"));
    }
    Ok(())
}

fn json_str(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\x08' => out.push_str("\\b"),
            '\x0c' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Python slice indices for a sequence of `len` items.
fn slice_indices(len: usize, parts: [Option<i64>; 3]) -> Res<Vec<usize>> {
    let len = len as i64;
    let step = parts[2].unwrap_or(1);
    if step == 0 {
        return rt("slice step cannot be zero");
    }
    let clamp = |i: Option<i64>, dflt: i64, lo: i64, hi: i64| -> i64 {
        match i {
            None => dflt,
            Some(i) if i < 0 => (i.saturating_add(len)).max(lo),
            Some(i) => i.min(hi),
        }
    };
    let mut out = Vec::new();
    if step > 0 {
        let (mut i, stop) = (clamp(parts[0], 0, 0, len), clamp(parts[1], len, 0, len));
        while i < stop {
            out.push(i as usize);
            i = i.saturating_add(step);
        }
    } else {
        let (mut i, stop) = (
            clamp(parts[0], len - 1, -1, len - 1),
            clamp(parts[1], -1, -1, len - 1),
        );
        while i > stop {
            out.push(i as usize);
            i = i.saturating_add(step);
        }
    }
    Ok(out)
}

fn python_strip<'s>(s: &'s str, chars: Option<&str>, left: bool, right: bool) -> &'s str {
    let pred = |c: char| match chars {
        Some(set) => set.contains(c),
        None => c.is_whitespace(),
    };
    let s = if left { s.trim_start_matches(pred) } else { s };
    if right {
        s.trim_end_matches(pred)
    } else {
        s
    }
}

// ---------------------------------------------------------------------------------------------
// Renderer.

enum Flow {
    Normal,
    Break,
    Continue,
}

struct Frame {
    vars: HashMap<String, Value>,
    /// A macro's frame: names not found in it resolve in the template's top-level frame.
    barrier: bool,
}

struct Renderer {
    frames: Vec<Frame>,
    steps: u64,
    calls: usize,
}

impl Renderer {
    fn step(&mut self, n: u64) -> Res<()> {
        self.steps += n;
        if self.steps > MAX_STEPS {
            return Err(TemplateError::Limit("evaluation steps"));
        }
        Ok(())
    }

    /// The items of `v` (see [`Value::iter_items`]), charged one step each before they are built.
    fn items(&mut self, v: &Value) -> Res<Vec<Value>> {
        if let Ok(n) = v.len() {
            self.step(n as u64)?;
        }
        v.iter_items()
    }

    /// `parts` joined by `sep`, checking the size as it grows (a list may repeat one big string).
    fn join(&mut self, parts: impl Iterator<Item = String>, sep: &str) -> Res<String> {
        let mut out = String::new();
        for (i, p) in parts.enumerate() {
            if i > 0 {
                out.push_str(sep);
            }
            out.push_str(&p);
            if out.len() > MAX_SIZE {
                return Err(TemplateError::Limit("value size"));
            }
            self.step(1 + (p.len() + sep.len()) as u64 / 64)?;
        }
        Ok(out)
    }

    /// Charge for building a value of `bytes` and check its size.
    fn built(&mut self, bytes: usize) -> Res<()> {
        if bytes > MAX_SIZE {
            return Err(TemplateError::Limit("value size"));
        }
        self.step(bytes as u64 / 64)
    }

    fn lookup(&self, name: &str) -> Value {
        for f in self.frames.iter().rev() {
            if let Some(v) = f.vars.get(name) {
                return v.clone();
            }
            if f.barrier {
                break;
            }
        }
        self.frames[0]
            .vars
            .get(name)
            .cloned()
            .unwrap_or(Value::Undefined)
    }

    fn set(&mut self, name: &str, v: Value) {
        if let Some(f) = self.frames.last_mut() {
            f.vars.insert(name.to_string(), v);
        }
    }

    fn render(&mut self, nodes: &[Node], out: &mut String) -> Res<Flow> {
        for n in nodes {
            self.step(1)?;
            match n {
                Node::Text(t) => out.push_str(t),
                Node::Out(e) => {
                    let v = self.eval(e)?;
                    v.repr(out, false);
                }
                Node::If(arms, els) => {
                    let mut taken = false;
                    for (cond, body) in arms {
                        if self.eval(cond)?.truthy() {
                            taken = true;
                            match self.render(body, out)? {
                                Flow::Normal => break,
                                flow => return Ok(flow),
                            }
                        }
                    }
                    if !taken {
                        match self.render(els, out)? {
                            Flow::Normal => {}
                            flow => return Ok(flow),
                        }
                    }
                }
                Node::For(f) => self.for_loop(f, out)?,
                Node::Set(SetTarget::Name(n), e) => {
                    let v = self.eval(e)?;
                    self.set(n, v);
                }
                Node::Set(SetTarget::Attr(n, attr), e) => {
                    let v = self.eval(e)?;
                    let Value::Namespace(ns) = self.lookup(n) else {
                        return rt(format!("cannot set an attribute of '{n}', not a namespace"));
                    };
                    let mut ns = ns.borrow_mut();
                    match ns.iter_mut().find(|(k, _)| &**k == attr) {
                        Some(slot) => slot.1 = v,
                        None => ns.push((attr.as_str().into(), v)),
                    }
                }
                Node::SetBlock(n, body) => {
                    let mut s = String::new();
                    self.render(body, &mut s)?;
                    self.set(n, Value::Str(s.into()));
                }
                Node::Macro(m) => self.set(&m.name, Value::Macro(m.clone())),
                Node::Break => return Ok(Flow::Break),
                Node::Continue => return Ok(Flow::Continue),
            }
            if out.len() > MAX_SIZE {
                return Err(TemplateError::Limit("output size"));
            }
        }
        Ok(Flow::Normal)
    }

    fn for_loop(&mut self, f: &ForLoop, out: &mut String) -> Res<()> {
        let iter = self.eval(&f.iter)?;
        let items = self.items(&iter)?;
        let mut kept = Vec::with_capacity(items.len());
        for item in items {
            self.step(1)?;
            self.frames.push(Frame {
                vars: HashMap::new(),
                barrier: false,
            });
            let ok = self
                .bind_targets(&f.targets, &item)
                .and_then(|_| match &f.cond {
                    Some(c) => Ok(self.eval(c)?.truthy()),
                    None => Ok(true),
                });
            self.frames.pop();
            if ok? {
                kept.push(item);
            }
        }
        if kept.is_empty() {
            self.render(&f.else_body, out)?;
            return Ok(());
        }
        let n = kept.len();
        for (i, item) in kept.iter().enumerate() {
            self.step(1)?;
            let lp = Value::dict(vec![
                ("index0", Value::Int(i as i64)),
                ("index", Value::Int(i as i64 + 1)),
                ("revindex0", Value::Int((n - 1 - i) as i64)),
                ("revindex", Value::Int((n - i) as i64)),
                ("first", Value::Bool(i == 0)),
                ("last", Value::Bool(i + 1 == n)),
                ("length", Value::Int(n as i64)),
                (
                    "previtem",
                    if i > 0 {
                        kept[i - 1].clone()
                    } else {
                        Value::Undefined
                    },
                ),
                (
                    "nextitem",
                    kept.get(i + 1).cloned().unwrap_or(Value::Undefined),
                ),
            ]);
            self.frames.push(Frame {
                vars: HashMap::new(),
                barrier: false,
            });
            self.set("loop", lp);
            let flow = self
                .bind_targets(&f.targets, item)
                .and_then(|_| self.render(&f.body, out));
            self.frames.pop();
            if let Flow::Break = flow? {
                break;
            }
        }
        Ok(())
    }

    fn bind_targets(&mut self, targets: &[String], item: &Value) -> Res<()> {
        if let [t] = targets {
            self.set(t, item.clone());
            return Ok(());
        }
        let parts = self.items(item)?;
        if parts.len() != targets.len() {
            return rt(format!(
                "cannot unpack {} values into {}",
                parts.len(),
                targets.len()
            ));
        }
        for (t, v) in targets.iter().zip(parts) {
            self.set(t, v);
        }
        Ok(())
    }

    fn eval(&mut self, e: &Expr) -> Res<Value> {
        self.step(1)?;
        Ok(match e {
            Expr::Lit(l) => match l {
                Lit::None => Value::None,
                Lit::Bool(b) => Value::Bool(*b),
                Lit::Int(i) => Value::Int(*i),
                Lit::Float(f) => Value::Float(*f),
                Lit::Str(s) => Value::Str(Rc::from(&**s)),
            },
            Expr::Name(n) => self.lookup(n),
            Expr::List(items) => {
                let v = items
                    .iter()
                    .map(|x| self.eval(x))
                    .collect::<Res<Vec<_>>>()?;
                Value::list(v)
            }
            Expr::Dict(items) => {
                let mut d: Vec<(Rc<str>, Value)> = Vec::new();
                for (k, v) in items {
                    let Value::Str(k) = self.eval(k)? else {
                        return unsupported("dict keys other than strings");
                    };
                    let v = self.eval(v)?;
                    match d.iter_mut().find(|(k2, _)| *k2 == k) {
                        Some(slot) => slot.1 = v,
                        None => d.push((k, v)),
                    }
                }
                Value::Dict(Rc::new(d))
            }
            Expr::Attr(obj, name) => {
                let o = self.eval(obj)?;
                get_attr(&o, name)?
            }
            Expr::Index(obj, idx) => {
                let o = self.eval(obj)?;
                let i = self.eval(idx)?;
                get_item(&o, &i)?
            }
            Expr::Slice(obj, parts) => {
                let o = self.eval(obj)?;
                let mut p = [None; 3];
                for (slot, e) in p.iter_mut().zip(parts.iter()) {
                    if let Some(e) = e {
                        *slot = match self.eval(e)? {
                            Value::None => None,
                            v => Some(v.as_int().ok_or(TemplateError::Runtime(
                                "slice indices must be integers".into(),
                            ))?),
                        };
                    }
                }
                match &o {
                    Value::List(l) => {
                        let idx = slice_indices(l.len(), p)?;
                        Value::list(idx.into_iter().map(|i| l[i].clone()).collect())
                    }
                    Value::Str(s) => {
                        let chars: Vec<char> = s.chars().collect();
                        let idx = slice_indices(chars.len(), p)?;
                        Value::Str(idx.into_iter().map(|i| chars[i]).collect::<String>().into())
                    }
                    Value::Undefined => return rt("slice of an undefined value"),
                    other => return rt(format!("cannot slice {}", other.type_name())),
                }
            }
            Expr::Call(callee, args) => self.call(callee, args)?,
            Expr::Filter(x, name, args) => {
                let v = self.eval(x)?;
                self.filter(v, name, args)?
            }
            Expr::Test(x, name, args, negated) => {
                let v = self.eval(x)?;
                Value::Bool(self.test(&v, name, args)? != *negated)
            }
            Expr::Neg(x) => match self.eval(x)? {
                Value::Int(i) => Value::Int(
                    i.checked_neg()
                        .ok_or(TemplateError::Limit("integer range"))?,
                ),
                Value::Float(f) => Value::Float(-f),
                Value::Bool(b) => Value::Int(-i64::from(b)),
                other => return rt(format!("bad operand for unary -: {}", other.type_name())),
            },
            Expr::Not(x) => Value::Bool(!self.eval(x)?.truthy()),
            Expr::And(a, b) => {
                let a = self.eval(a)?;
                if a.truthy() {
                    self.eval(b)?
                } else {
                    a
                }
            }
            Expr::Or(a, b) => {
                let a = self.eval(a)?;
                if a.truthy() {
                    a
                } else {
                    self.eval(b)?
                }
            }
            Expr::Bin(op, a, b) => {
                let a = self.eval(a)?;
                let b = self.eval(b)?;
                self.binary(op, &a, &b)?
            }
            Expr::Compare(first, rest) => {
                let mut left = self.eval(first)?;
                for (op, e) in rest {
                    let right = self.eval(e)?;
                    if !compare(op, &left, &right)? {
                        return Ok(Value::Bool(false));
                    }
                    left = right;
                }
                Value::Bool(true)
            }
            Expr::Cond(cond, then, other) => {
                if self.eval(cond)?.truthy() {
                    self.eval(then)?
                } else if let Some(o) = other {
                    self.eval(o)?
                } else {
                    Value::Undefined
                }
            }
        })
    }

    fn binary(&mut self, op: &str, a: &Value, b: &Value) -> Res<Value> {
        let type_err = || {
            rt(format!(
                "unsupported operand types for {op}: {} and {}",
                a.type_name(),
                b.type_name()
            ))
        };
        let v = match (op, a, b) {
            ("~", _, _) => {
                let s = a.to_str() + &b.to_str();
                self.built(s.len())?;
                Value::Str(s.into())
            }
            ("+", Value::Str(x), Value::Str(y)) => {
                self.built(x.len() + y.len())?;
                Value::Str(format!("{x}{y}").into())
            }
            ("+", Value::List(x), Value::List(y)) => {
                self.built((x.len() + y.len()) * 8)?;
                Value::list(x.iter().chain(y.iter()).cloned().collect())
            }
            ("*", Value::Str(s), n) | ("*", n, Value::Str(s)) if n.as_int().is_some() => {
                let n = n.as_int().unwrap_or(0).max(0) as usize;
                self.built(s.len().saturating_mul(n))?;
                Value::Str(s.repeat(n).into())
            }
            ("*", Value::List(l), n) | ("*", n, Value::List(l)) if n.as_int().is_some() => {
                let n = n.as_int().unwrap_or(0).max(0) as usize;
                self.built(l.len().saturating_mul(n).saturating_mul(8))?;
                let mut v = Vec::new();
                for _ in 0..n {
                    v.extend(l.iter().cloned());
                }
                Value::list(v)
            }
            _ => {
                if let (Some(x), Some(y)) = (a.as_int(), b.as_int()) {
                    let over = TemplateError::Limit("integer range");
                    match op {
                        "+" => Value::Int(x.checked_add(y).ok_or(over)?),
                        "-" => Value::Int(x.checked_sub(y).ok_or(over)?),
                        "*" => Value::Int(x.checked_mul(y).ok_or(over)?),
                        "/" if y == 0 => return rt("division by zero"),
                        "/" => Value::Float(x as f64 / y as f64),
                        "//" | "%" if y == 0 => return rt("division by zero"),
                        "//" => Value::Int(
                            x.checked_div_euclid(y).ok_or(over)?
                                - i64::from(y < 0 && x.rem_euclid(y) != 0),
                        ),
                        "%" => {
                            let r = x.checked_rem(y).ok_or(over)?;
                            Value::Int(if r != 0 && ((r < 0) != (y < 0)) {
                                r + y
                            } else {
                                r
                            })
                        }
                        "**" if y >= 0 => Value::Int(
                            u32::try_from(y)
                                .ok()
                                .and_then(|y| x.checked_pow(y))
                                .ok_or(over)?,
                        ),
                        "**" => Value::Float((x as f64).powf(y as f64)),
                        _ => return type_err(),
                    }
                } else if let (Some(x), Some(y)) = (a.as_num(), b.as_num()) {
                    match op {
                        "+" => Value::Float(x + y),
                        "-" => Value::Float(x - y),
                        "*" => Value::Float(x * y),
                        "/" | "//" | "%" if y == 0.0 => return rt("division by zero"),
                        "/" => Value::Float(x / y),
                        "//" => Value::Float((x / y).floor()),
                        "%" => Value::Float(x - y * (x / y).floor()),
                        "**" => Value::Float(x.powf(y)),
                        _ => return type_err(),
                    }
                } else {
                    return type_err();
                }
            }
        };
        Ok(v)
    }

    fn call(&mut self, callee: &Expr, args: &Args) -> Res<Value> {
        if let Expr::Attr(obj, name) = callee {
            let o = self.eval(obj)?;
            if matches!(o, Value::Str(_) | Value::Dict(_) | Value::List(_)) {
                let (pos, kw) = self.eval_args(args)?;
                return self.method(&o, name, &pos, &kw);
            }
            let f = get_attr(&o, name)?;
            return self.call_value(&f, args);
        }
        let f = self.eval(callee)?;
        self.call_value(&f, args)
    }

    fn eval_args(&mut self, args: &Args) -> Res<CallArgs> {
        let pos = args
            .pos
            .iter()
            .map(|e| self.eval(e))
            .collect::<Res<Vec<_>>>()?;
        let mut kw = Vec::with_capacity(args.kw.len());
        for (k, e) in &args.kw {
            kw.push((k.clone(), self.eval(e)?));
        }
        Ok((pos, kw))
    }

    fn call_value(&mut self, f: &Value, args: &Args) -> Res<Value> {
        let (pos, kw) = self.eval_args(args)?;
        match f {
            Value::Builtin("raise_exception") => Err(TemplateError::Raised(
                pos.first().map(Value::to_str).unwrap_or_default(),
            )),
            Value::Builtin("namespace") => {
                let mut items: Vec<(Rc<str>, Value)> = Vec::new();
                if let Some(Value::Dict(d)) = pos.first() {
                    items.extend(d.iter().cloned());
                }
                items.extend(kw.into_iter().map(|(k, v)| (k.into(), v)));
                Ok(Value::Namespace(Rc::new(RefCell::new(items))))
            }
            Value::Builtin("range") => {
                let ints = pos
                    .iter()
                    .map(|v| {
                        v.as_int()
                            .ok_or(TemplateError::Runtime("range takes integers".into()))
                    })
                    .collect::<Res<Vec<_>>>()?;
                let (start, stop, step) = match ints.as_slice() {
                    [n] => (0, *n, 1),
                    [a, b] => (*a, *b, 1),
                    [a, b, s] => (*a, *b, *s),
                    _ => return rt("range takes 1 to 3 arguments"),
                };
                if step == 0 {
                    return rt("range step cannot be zero");
                }
                let mut v = Vec::new();
                let mut i = start;
                while (step > 0 && i < stop) || (step < 0 && i > stop) {
                    self.step(1)?;
                    if v.len() >= MAX_SIZE / 8 {
                        return Err(TemplateError::Limit("value size"));
                    }
                    v.push(Value::Int(i));
                    i = i.saturating_add(step);
                }
                Ok(Value::list(v))
            }
            Value::Macro(m) => {
                if self.calls >= MAX_CALL_DEPTH {
                    return Err(TemplateError::Limit("macro call depth"));
                }
                let mut vars = HashMap::new();
                for (i, (name, default)) in m.params.iter().enumerate() {
                    let v = if let Some(v) = pos.get(i) {
                        v.clone()
                    } else if let Some((_, v)) = kw.iter().find(|(k, _)| k == name) {
                        v.clone()
                    } else if let Some(d) = default {
                        self.eval(d)?
                    } else {
                        Value::Undefined
                    };
                    vars.insert(name.clone(), v);
                }
                if pos.len() > m.params.len() {
                    return rt(format!(
                        "macro '{}' takes {} arguments",
                        m.name,
                        m.params.len()
                    ));
                }
                self.frames.push(Frame {
                    vars,
                    barrier: true,
                });
                self.calls += 1;
                let mut s = String::new();
                let r = self.render(&m.body, &mut s);
                self.calls -= 1;
                self.frames.pop();
                r?;
                Ok(Value::Str(s.into()))
            }
            Value::Undefined => rt("call of an undefined function"),
            other => rt(format!("{} is not callable", other.type_name())),
        }
    }

    fn method(
        &mut self,
        o: &Value,
        name: &str,
        pos: &[Value],
        kw: &[(String, Value)],
    ) -> Res<Value> {
        let arg = |i: usize, key: &str| -> Option<&Value> {
            pos.get(i)
                .or_else(|| kw.iter().find(|(k, _)| k == key).map(|(_, v)| v))
        };
        let str_arg = |i: usize, key: &str| -> Res<Option<String>> {
            match arg(i, key) {
                None | Some(Value::None) => Ok(None),
                Some(Value::Str(s)) => Ok(Some(s.to_string())),
                Some(v) => rt(format!(
                    "{name}() argument must be a string, not {}",
                    v.type_name()
                )),
            }
        };
        match o {
            Value::Str(s) => {
                let v = match name {
                    "strip" | "lstrip" | "rstrip" => {
                        let chars = str_arg(0, "chars")?;
                        let (l, r) = (name != "rstrip", name != "lstrip");
                        Value::str(python_strip(s, chars.as_deref(), l, r))
                    }
                    "startswith" | "endswith" => {
                        let pats = match arg(0, "prefix") {
                            Some(Value::Str(p)) => vec![p.to_string()],
                            Some(Value::List(l)) => l.iter().map(Value::to_str).collect(),
                            _ => return rt(format!("{name}() takes a string")),
                        };
                        Value::Bool(pats.iter().any(|p| {
                            if name == "startswith" {
                                s.starts_with(p.as_str())
                            } else {
                                s.ends_with(p.as_str())
                            }
                        }))
                    }
                    "split" | "rsplit" => {
                        let sep = str_arg(0, "sep")?;
                        let max = arg(1, "maxsplit").and_then(Value::as_int).unwrap_or(-1);
                        let parts: Vec<String> = match (sep, max < 0) {
                            (Some(sep), _) if sep.is_empty() => return rt("empty separator"),
                            (Some(sep), true) => s.split(sep.as_str()).map(String::from).collect(),
                            (Some(sep), false) if name == "split" => s
                                .splitn(max as usize + 1, sep.as_str())
                                .map(String::from)
                                .collect(),
                            (Some(sep), false) => {
                                let mut v: Vec<String> = s
                                    .rsplitn(max as usize + 1, sep.as_str())
                                    .map(String::from)
                                    .collect();
                                v.reverse();
                                v
                            }
                            (None, true) => s.split_whitespace().map(String::from).collect(),
                            (None, false) => {
                                return unsupported("split() on whitespace with maxsplit")
                            }
                        };
                        self.built(s.len() + parts.len() * 8)?;
                        Value::list(parts.into_iter().map(|p| Value::Str(p.into())).collect())
                    }
                    "replace" => {
                        let (Some(old), Some(new)) = (str_arg(0, "old")?, str_arg(1, "new")?)
                        else {
                            return rt("replace() takes two strings");
                        };
                        let count = arg(2, "count").and_then(Value::as_int).unwrap_or(-1);
                        let n = if old.is_empty() {
                            s.chars().count() + 1
                        } else {
                            s.matches(old.as_str()).count()
                        };
                        self.built(s.len() + n.saturating_mul(new.len()))?;
                        if count < 0 {
                            Value::Str(s.replace(old.as_str(), &new).into())
                        } else {
                            Value::Str(s.replacen(old.as_str(), &new, count as usize).into())
                        }
                    }
                    "upper" => Value::Str(s.to_uppercase().into()),
                    "lower" => Value::Str(s.to_lowercase().into()),
                    "title" => Value::Str(title(s).into()),
                    "capitalize" => Value::Str(capitalize(s).into()),
                    "find" => {
                        let Some(sub) = str_arg(0, "sub")? else {
                            return rt("find() takes a string");
                        };
                        Value::Int(
                            s.find(sub.as_str())
                                .map_or(-1, |b| s[..b].chars().count() as i64),
                        )
                    }
                    "count" => {
                        let Some(sub) = str_arg(0, "sub")? else {
                            return rt("count() takes a string");
                        };
                        Value::Int(if sub.is_empty() {
                            s.chars().count() as i64 + 1
                        } else {
                            s.matches(sub.as_str()).count() as i64
                        })
                    }
                    "join" => {
                        let Some(items) = arg(0, "iterable") else {
                            return rt("join() takes a list");
                        };
                        let items = self.items(items)?;
                        let parts = items.iter().map(Value::to_str);
                        Value::Str(self.join(parts, s)?.into())
                    }
                    "isdigit" => {
                        Value::Bool(!s.is_empty() && s.chars().all(|c| c.is_ascii_digit()))
                    }
                    "isspace" => Value::Bool(!s.is_empty() && s.chars().all(char::is_whitespace)),
                    _ => return unsupported(format!("string method {name}()")),
                };
                Ok(v)
            }
            Value::Dict(d) => match name {
                "items" => Ok(Value::list(
                    d.iter()
                        .map(|(k, v)| Value::list(vec![Value::Str(k.clone()), v.clone()]))
                        .collect(),
                )),
                "keys" => Ok(Value::list(
                    d.iter().map(|(k, _)| Value::Str(k.clone())).collect(),
                )),
                "values" => Ok(Value::list(d.iter().map(|(_, v)| v.clone()).collect())),
                "get" => {
                    let key = arg(0, "key").map(Value::to_str).unwrap_or_default();
                    Ok(d.iter()
                        .find(|(k, _)| **k == *key)
                        .map(|(_, v)| v.clone())
                        .or_else(|| arg(1, "default").cloned())
                        .unwrap_or(Value::None))
                }
                _ => unsupported(format!("dict method {name}()")),
            },
            _ => unsupported(format!("{} method {name}()", o.type_name())),
        }
    }

    fn filter(&mut self, v: Value, name: &str, args: &Args) -> Res<Value> {
        let (pos, kw) = self.eval_args(args)?;
        let arg = |i: usize, key: &str| -> Option<Value> {
            pos.get(i)
                .or_else(|| kw.iter().find(|(k, _)| k == key).map(|(_, v)| v))
                .cloned()
        };
        Ok(match name {
            "trim" => {
                let chars = arg(0, "chars").map(|c| c.to_str());
                Value::str(python_strip(&v.to_str(), chars.as_deref(), true, true))
            }
            "length" | "count" => Value::Int(v.len()? as i64),
            "tojson" => {
                let indent = match arg(0, "indent") {
                    None | Some(Value::None) => None,
                    Some(i) => Some(i.as_int().filter(|&i| (0..=16).contains(&i)).ok_or(
                        TemplateError::Unsupported("tojson indent other than 0..=16".into()),
                    )? as usize),
                };
                if kw.iter().any(|(k, _)| k != "indent" && k != "ensure_ascii") {
                    return unsupported("tojson options other than indent");
                }
                let mut s = String::new();
                to_json(&v, indent, 0, &mut s)?;
                self.built(s.len())?;
                Value::Str(s.into())
            }
            "upper" => Value::Str(v.to_str().to_uppercase().into()),
            "lower" => Value::Str(v.to_str().to_lowercase().into()),
            "capitalize" => Value::Str(capitalize(&v.to_str()).into()),
            "title" => Value::Str(title(&v.to_str()).into()),
            "string" => Value::Str(v.to_str().into()),
            "safe" => v,
            "default" | "d" => {
                let boolean = arg(1, "boolean").is_some_and(|b| b.truthy());
                if matches!(v, Value::Undefined) || (boolean && !v.truthy()) {
                    arg(0, "default_value").unwrap_or(Value::str(""))
                } else {
                    v
                }
            }
            "join" => {
                let sep = arg(0, "d").map(|s| s.to_str()).unwrap_or_default();
                let attr = arg(1, "attribute");
                let items = self.items(&v)?;
                let items = match &attr {
                    Some(a) => {
                        let a = a.to_str();
                        items
                            .iter()
                            .map(|it| get_attr(it, &a))
                            .collect::<Res<Vec<_>>>()?
                    }
                    None => items,
                };
                Value::Str(self.join(items.iter().map(Value::to_str), &sep)?.into())
            }
            "first" => self
                .items(&v)?
                .into_iter()
                .next()
                .unwrap_or(Value::Undefined),
            "last" => match &v {
                Value::Str(s) => s
                    .chars()
                    .next_back()
                    .map_or(Value::Undefined, |c| Value::Str(c.to_string().into())),
                _ => self.items(&v)?.pop().unwrap_or(Value::Undefined),
            },
            "items" => match &v {
                Value::Dict(_) => self.method(&v, "items", &[], &[])?,
                Value::Undefined => Value::list(Vec::new()),
                other => return rt(format!("items of {}", other.type_name())),
            },
            "list" => Value::list(self.items(&v)?),
            "reverse" => match &v {
                Value::Str(s) => Value::Str(s.chars().rev().collect::<String>().into()),
                _ => {
                    let mut l = self.items(&v)?;
                    l.reverse();
                    Value::list(l)
                }
            },
            "int" => match &v {
                Value::Int(_) => v,
                Value::Bool(b) => Value::Int(i64::from(*b)),
                Value::Float(f) if f.is_finite() => Value::Int(f.trunc() as i64),
                Value::Str(s) => Value::Int(s.trim().parse().unwrap_or(0)),
                _ => Value::Int(0),
            },
            "float" => match &v {
                Value::Str(s) => Value::Float(s.trim().parse().unwrap_or(0.0)),
                _ => Value::Float(v.as_num().unwrap_or(0.0)),
            },
            "abs" => match v {
                Value::Int(i) => Value::Int(
                    i.checked_abs()
                        .ok_or(TemplateError::Limit("integer range"))?,
                ),
                Value::Float(f) => Value::Float(f.abs()),
                other => return rt(format!("abs of {}", other.type_name())),
            },
            "replace" => {
                let (Some(old), Some(new)) = (arg(0, "old"), arg(1, "new")) else {
                    return rt("replace takes two strings");
                };
                let mut p = vec![old, new];
                p.extend(arg(2, "count"));
                self.method(&Value::Str(v.to_str().into()), "replace", &p, &[])?
            }
            "selectattr" | "rejectattr" => {
                let Some(attr) = arg(0, "attr").map(|a| a.to_str()) else {
                    return rt(format!("{name} takes an attribute name"));
                };
                let test = pos.get(1).map(Value::to_str);
                let mut out = Vec::new();
                for it in self.items(&v)? {
                    self.step(1)?;
                    let a = get_attr(&it, &attr)?;
                    let hit = match &test {
                        None => a.truthy(),
                        Some(t) => {
                            let targs = Args {
                                pos: pos[2..].iter().map(|x| value_expr(x.clone())).collect(),
                                kw: Vec::new(),
                            };
                            self.test(&a, t, &targs)?
                        }
                    };
                    if hit == (name == "selectattr") {
                        out.push(it);
                    }
                }
                Value::list(out)
            }
            "select" | "reject" => {
                let test = pos.first().map(Value::to_str);
                let mut out = Vec::new();
                for it in self.items(&v)? {
                    self.step(1)?;
                    let hit = match &test {
                        None => it.truthy(),
                        Some(t) => {
                            let targs = Args {
                                pos: pos[1..].iter().map(|x| value_expr(x.clone())).collect(),
                                kw: Vec::new(),
                            };
                            self.test(&it, t, &targs)?
                        }
                    };
                    if hit == (name == "select") {
                        out.push(it);
                    }
                }
                Value::list(out)
            }
            "map" => {
                let items = self.items(&v)?;
                let mut out = Vec::with_capacity(items.len());
                if let Some(attr) = kw
                    .iter()
                    .find(|(k, _)| k == "attribute")
                    .map(|(_, a)| a.to_str())
                {
                    let dflt = kw
                        .iter()
                        .find(|(k, _)| k == "default")
                        .map(|(_, d)| d.clone());
                    for it in items {
                        let a = get_attr(&it, &attr)?;
                        out.push(match (&a, &dflt) {
                            (Value::Undefined, Some(d)) => d.clone(),
                            _ => a,
                        });
                    }
                } else if let Some(f) = pos.first().map(Value::to_str) {
                    let fargs = Args {
                        pos: pos[1..].iter().map(|x| value_expr(x.clone())).collect(),
                        kw: Vec::new(),
                    };
                    for it in items {
                        self.step(1)?;
                        out.push(self.filter(it, &f, &fargs)?);
                    }
                } else {
                    return rt("map takes a filter name or attribute=");
                }
                Value::list(out)
            }
            "unique" => {
                let mut out: Vec<Value> = Vec::new();
                for it in self.items(&v)? {
                    self.step(out.len() as u64 + 1)?;
                    if !out.iter().any(|o| values_eq(o, &it)) {
                        out.push(it);
                    }
                }
                Value::list(out)
            }
            "wordcount" => Value::Int(v.to_str().split_whitespace().count() as i64),
            _ => return unsupported(format!("filter '{name}'")),
        })
    }

    fn test(&mut self, v: &Value, name: &str, args: &Args) -> Res<bool> {
        let (pos, _) = self.eval_args(args)?;
        let other = pos.first();
        Ok(match name {
            "defined" => !matches!(v, Value::Undefined),
            "undefined" => matches!(v, Value::Undefined),
            "none" => matches!(v, Value::None),
            "true" => matches!(v, Value::Bool(true)),
            "false" => matches!(v, Value::Bool(false)),
            "boolean" => matches!(v, Value::Bool(_)),
            "string" => matches!(v, Value::Str(_)),
            "number" => matches!(v, Value::Int(_) | Value::Float(_) | Value::Bool(_)),
            "integer" => matches!(v, Value::Int(_)),
            "float" => matches!(v, Value::Float(_)),
            "mapping" => matches!(v, Value::Dict(_)),
            // jinja2's Undefined iterates (as empty), so it is iterable.
            "iterable" => matches!(
                v,
                Value::Str(_) | Value::List(_) | Value::Dict(_) | Value::Undefined
            ),
            "sequence" => matches!(
                v,
                Value::Str(_) | Value::List(_) | Value::Dict(_) | Value::Undefined
            ),
            "callable" => matches!(v, Value::Macro(_) | Value::Builtin(_)),
            "odd" | "even" => match v.as_int() {
                Some(i) => (i.rem_euclid(2) == 1) == (name == "odd"),
                None => return rt(format!("{name} of {}", v.type_name())),
            },
            "divisibleby" => match (v.as_int(), other.and_then(Value::as_int)) {
                (Some(_), Some(0)) => return rt("division by zero"),
                (Some(a), Some(b)) => a % b == 0,
                _ => return rt("divisibleby takes integers"),
            },
            "eq" | "equalto" | "==" | "sameas" => other.is_some_and(|o| values_eq(v, o)),
            "ne" | "!=" => !other.is_some_and(|o| values_eq(v, o)),
            "lt" | "lessthan" | "<" => compare("<", v, other.unwrap_or(&Value::Undefined))?,
            "gt" | "greaterthan" | ">" => compare(">", v, other.unwrap_or(&Value::Undefined))?,
            "le" | "<=" => compare("<=", v, other.unwrap_or(&Value::Undefined))?,
            "ge" | ">=" => compare(">=", v, other.unwrap_or(&Value::Undefined))?,
            "in" => compare("in", v, other.unwrap_or(&Value::Undefined))?,
            "lower" => v.to_str().chars().all(|c| !c.is_uppercase()),
            "upper" => v.to_str().chars().all(|c| !c.is_lowercase()),
            _ => return unsupported(format!("test '{name}'")),
        })
    }
}

/// An already-evaluated value as an expression (filters that apply tests or filters by name).
fn value_expr(v: Value) -> Expr {
    Expr::Lit(match v {
        Value::None => Lit::None,
        Value::Bool(b) => Lit::Bool(b),
        Value::Int(i) => Lit::Int(i),
        Value::Float(f) => Lit::Float(f),
        Value::Str(s) => Lit::Str(Arc::from(&*s)),
        other => Lit::Str(other.to_str().into()),
    })
}

fn title(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut prev_alpha = false;
    for c in s.chars() {
        if prev_alpha {
            out.extend(c.to_lowercase());
        } else {
            out.extend(c.to_uppercase());
        }
        prev_alpha = c.is_alphabetic();
    }
    out
}

fn capitalize(s: &str) -> String {
    let mut it = s.chars();
    match it.next() {
        Some(c) => c
            .to_uppercase()
            .chain(it.flat_map(char::to_lowercase))
            .collect(),
        None => String::new(),
    }
}

fn get_attr(o: &Value, name: &str) -> Res<Value> {
    match o {
        Value::Dict(d) => Ok(d
            .iter()
            .find(|(k, _)| &**k == name)
            .map_or(Value::Undefined, |(_, v)| v.clone())),
        Value::Namespace(ns) => Ok(ns
            .borrow()
            .iter()
            .find(|(k, _)| &**k == name)
            .map_or(Value::Undefined, |(_, v)| v.clone())),
        Value::Undefined => rt(format!("undefined value has no attribute '{name}'")),
        _ => Ok(Value::Undefined),
    }
}

fn get_item(o: &Value, i: &Value) -> Res<Value> {
    match (o, i) {
        (Value::Dict(_) | Value::Namespace(_), Value::Str(k)) => get_attr(o, k),
        (Value::List(l), idx) if idx.as_int().is_some() => {
            let i = idx.as_int().unwrap_or(0);
            let i = if i < 0 { i + l.len() as i64 } else { i };
            Ok(usize::try_from(i)
                .ok()
                .and_then(|i| l.get(i))
                .cloned()
                .unwrap_or(Value::Undefined))
        }
        (Value::Str(s), idx) if idx.as_int().is_some() => {
            let n = s.chars().count() as i64;
            let i = idx.as_int().unwrap_or(0);
            let i = if i < 0 { i + n } else { i };
            Ok(usize::try_from(i)
                .ok()
                .and_then(|i| s.chars().nth(i))
                .map_or(Value::Undefined, |c| Value::Str(c.to_string().into())))
        }
        (Value::Undefined, _) => rt("subscript of an undefined value"),
        _ => Ok(Value::Undefined),
    }
}

fn compare(op: &str, a: &Value, b: &Value) -> Res<bool> {
    Ok(match op {
        "==" => values_eq(a, b),
        "!=" => !values_eq(a, b),
        "in" | "not in" => {
            let hit = match b {
                Value::Str(s) => match a {
                    Value::Str(x) => s.contains(&**x),
                    other => {
                        return rt(format!(
                            "'in <string>' requires a string, not {}",
                            other.type_name()
                        ))
                    }
                },
                Value::List(l) => l.iter().any(|x| values_eq(a, x)),
                Value::Dict(d) => matches!(a, Value::Str(k) if d.iter().any(|(k2, _)| k2 == k)),
                Value::Namespace(ns) => {
                    matches!(a, Value::Str(k) if ns.borrow().iter().any(|(k2, _)| k2 == k))
                }
                Value::Undefined => false,
                other => return rt(format!("'in' on {}", other.type_name())),
            };
            hit == (op == "in")
        }
        _ => {
            let ord = match (a, b) {
                (Value::Str(x), Value::Str(y)) => x.cmp(y),
                _ => match (a.as_num(), b.as_num()) {
                    (Some(x), Some(y)) => match x.partial_cmp(&y) {
                        Some(o) => o,
                        None => return Ok(false),
                    },
                    _ => {
                        return rt(format!(
                            "'{op}' between {} and {}",
                            a.type_name(),
                            b.type_name()
                        ))
                    }
                },
            };
            match op {
                "<" => ord.is_lt(),
                ">" => ord.is_gt(),
                "<=" => ord.is_le(),
                _ => ord.is_ge(),
            }
        }
    })
}

impl Template {
    /// Render with the variables `vars` (plus the globals `raise_exception`, `namespace`, `range`).
    pub(crate) fn render(&self, vars: Vec<(&str, Value)>) -> Result<String, TemplateError> {
        let mut root = HashMap::new();
        for g in ["raise_exception", "namespace", "range"] {
            root.insert(g.to_string(), Value::Builtin(g));
        }
        for (k, v) in vars {
            root.insert(k.to_string(), v);
        }
        let mut r = Renderer {
            frames: vec![Frame {
                vars: root,
                barrier: false,
            }],
            steps: 0,
            calls: 0,
        };
        let mut out = String::new();
        let body = self.body.clone();
        r.render(&body, &mut out)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(t: &str) -> Result<String, TemplateError> {
        Template::parse(t)?.render(vec![("n", Value::Int(3))])
    }

    #[test]
    fn hostile_templates_are_typed_errors() {
        let deep = "(".repeat(10_000) + "1" + &")".repeat(10_000);
        assert_eq!(
            render(&format!("{{{{ {deep} }}}}")),
            Err(TemplateError::Limit("nesting depth"))
        );
        let not = "not ".repeat(10_000);
        assert_eq!(
            render(&format!("{{{{ {not} 1 }}}}")),
            Err(TemplateError::Limit("nesting depth"))
        );
        let blocks = "{% if 1 %}".repeat(1000) + &"{% endif %}".repeat(1000);
        assert_eq!(render(&blocks), Err(TemplateError::Limit("nesting depth")));
        assert_eq!(
            render(
                "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}"
            ),
            Err(TemplateError::Limit("evaluation steps"))
        );
        assert_eq!(
            render("{{ 'a' * 1000000000 }}"),
            Err(TemplateError::Limit("value size"))
        );
        assert_eq!(
            render("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}"),
            Err(TemplateError::Limit("value size"))
        );
        assert_eq!(
            render("{% for i in range(1000) %}{% for j in range(1000) %}{{ 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' }}{% endfor %}{% endfor %}"),
            Err(TemplateError::Limit("output size"))
        );
        // One big string repeated in a list: joining or printing it stops at the size limit.
        let big = "{% set s = 'x' * 10000000 %}{% set l = [s] * 1000000 %}";
        assert_eq!(
            render(&format!("{big}{{{{ l | join }}}}")),
            Err(TemplateError::Limit("value size"))
        );
        assert_eq!(
            render(&format!("{big}{{{{ ''.join(l) }}}}")),
            Err(TemplateError::Limit("value size"))
        );
        assert_eq!(
            render(&format!("{big}{{{{ l }}}}")),
            Err(TemplateError::Limit("output size"))
        );
        assert_eq!(
            render(&format!("{big}{{{{ l ~ 'a' }}}}")),
            Err(TemplateError::Limit("value size"))
        );
        assert_eq!(
            render(&format!("{big}{{{{ l | tojson }}}}")),
            Err(TemplateError::Limit("value size"))
        );
        assert_eq!(
            render(&format!("{big}{{% for c in s %}}{{% endfor %}}")),
            Err(TemplateError::Limit("evaluation steps"))
        );
        assert_eq!(
            render("{% macro f(x) %}{{ f(x) }}{% endmacro %}{{ f(1) }}"),
            Err(TemplateError::Limit("macro call depth"))
        );
        assert_eq!(
            render("{{ 9223372036854775807 + 1 }}"),
            Err(TemplateError::Limit("integer range"))
        );
        for bad in [
            "{{ 1 ",
            "{% if %}",
            "{% for x in %}{% endfor %}",
            "{% endfor %}",
            "{# x",
            "{{ 'x }}",
            "{{ 1 +* 2 }}",
            "{% if 1 %}",
        ] {
            assert!(
                matches!(render(bad), Err(TemplateError::Syntax { .. })),
                "{bad}: {:?}",
                render(bad)
            );
        }
        assert!(matches!(
            render("{{ 1 | nofilter }}"),
            Err(TemplateError::Unsupported(_))
        ));
        assert!(matches!(
            render("{% call x() %}{% endcall %}"),
            Err(TemplateError::Unsupported(_))
        ));
        assert!(matches!(
            render("{{ 1 / 0 }}"),
            Err(TemplateError::Runtime(_))
        ));
        assert!(matches!(
            render("{{ 'a'[::0] }}"),
            Err(TemplateError::Runtime(_))
        ));
    }

    #[test]
    fn bare_test_arguments_and_conditionals() {
        assert_eq!(
            render("{{ n is divisibleby 3 }}{{ n is sameas 3 }}{{ 1 if n is odd else 2 }}")
                .unwrap(),
            "TrueTrue1"
        );
        assert_eq!(
            render("{{ [1,2,3][n - 2:] }}{{ [1,2,3][-5:-1] }}{{ [1,2,3][::-2] }}").unwrap(),
            "[2, 3][1, 2][3, 1]"
        );
    }
}
