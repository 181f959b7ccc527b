//! A small backtracking regex engine with the semantics llama.cpp's pre-tokenizer gets from
//! `std::regex` (ECMAScript grammar, leftmost-first alternation, no captures), over code points.
//!
//! llama.cpp runs an expression in one of two ways, and so do we ([`Regex::new`] picks):
//! - it names a Unicode category (`\p{L}`, `\p{N}`, `\p{P}`, `\p{M}`, `\p{S}`, `\p{Lu}` …): the text
//!   is *collapsed* first — ASCII stays, any other code point becomes one marker per category
//!   (0x0B for white space, 0xD0 for "other") — and `\p{X}` matches X's marker or X's ASCII
//!   members. The case classes `\p{Lu}`/`\p{Ll}`/… all collapse to "letter", as there.
//! - otherwise the code points are matched as they are, non-ASCII white space replaced by 0x0B
//!   (so `\s` sees it).
//!
//! `\s` is `[\t\n\v\f\r ]`, `\d` is `[0-9]`, `\w` is `[A-Za-z0-9_]` and `.` is anything but `\r`/`\n`
//! (the "C" locale). Constructs outside that grammar — lookbehind, inline flags, named groups,
//! backreferences, possessive quantifiers, unknown `\p{…}` — are an [`Error::Model`] at build
//! time, never a silent mismatch.

use super::unicode;
use crate::{Error, Result};

/// Collapsed-text markers (llama.cpp's choice of bytes).
const M_OTHER: u32 = 0xD0;
const M_NUMBER: u32 = 0xD1;
const M_LETTER: u32 = 0xD2;
const M_PUNCT: u32 = 0xD3;
const M_MARK: u32 = 0xD4;
const M_SYMBOL: u32 = 0xD5;
const VT: u32 = 0x0B;

/// Backtracking steps one search may take before the split gives up on the rest of a chunk.
const STEP_BUDGET: u64 = 50_000_000;

#[derive(Clone, Debug, PartialEq)]
enum Item {
    Range(u32, u32),
    Space(bool),
    Digit(bool),
    Word(bool),
}

#[derive(Clone, Debug, PartialEq)]
struct Class {
    negate: bool,
    items: Vec<Item>,
}

fn is_space(c: u32) -> bool {
    matches!(c, 0x09..=0x0D | 0x20)
}
fn is_digit(c: u32) -> bool {
    (0x30..=0x39).contains(&c)
}
fn is_word(c: u32) -> bool {
    is_digit(c) || (0x41..=0x5A).contains(&c) || (0x61..=0x7A).contains(&c) || c == 0x5F
}

impl Class {
    fn matches(&self, c: u32) -> bool {
        let hit = self.items.iter().any(|it| match *it {
            Item::Range(lo, hi) => lo <= c && c <= hi,
            Item::Space(neg) => is_space(c) != neg,
            Item::Digit(neg) => is_digit(c) != neg,
            Item::Word(neg) => is_word(c) != neg,
        });
        hit != self.negate
    }
}

#[derive(Clone, Debug)]
enum Node {
    Char(u32),
    Class(Class),
    Any,
    Start,
    End,
    WordBoundary(bool),
    Concat(Vec<Node>),
    Alt(Vec<Node>),
    Look(Box<Node>, bool),
    Repeat {
        node: Box<Node>,
        min: u32,
        max: Option<u32>,
        greedy: bool,
    },
}

/// The ASCII members and marker of a category class in collapsed mode.
fn category_items(name: &str) -> Option<Vec<Item>> {
    let r = |a: u8, b: u8| Item::Range(a as u32, b as u32);
    let m = |x: u32| Item::Range(x, x);
    Some(match name {
        "N" => vec![m(M_NUMBER), r(b'0', b'9')],
        "L" | "Lu" | "Ll" | "Lt" | "Lm" | "Lo" => {
            vec![m(M_LETTER), r(b'A', b'Z'), r(b'a', b'z')]
        }
        "P" => vec![
            m(M_PUNCT),
            r(b'!', b'#'),
            r(b'%', b'*'),
            r(b',', b'/'),
            r(b':', b';'),
            r(b'?', b'@'),
            r(b'[', b']'),
            r(b'_', b'_'),
            r(b'{', b'{'),
            r(b'}', b'}'),
        ],
        "M" => vec![m(M_MARK)],
        "S" => vec![
            m(M_SYMBOL),
            r(b'$', b'$'),
            r(b'+', b'+'),
            r(b'<', b'>'),
            r(b'^', b'^'),
            r(b'`', b'`'),
            r(b'|', b'|'),
            r(b'~', b'~'),
        ],
        _ => return None,
    })
}

/// The category names that switch an expression to collapsed matching (as llama.cpp lists them).
const CATEGORY_NAMES: &[&str] = &[
    r"\p{N}", r"\p{L}", r"\p{P}", r"\p{M}", r"\p{S}", r"\p{Lu}", r"\p{Ll}", r"\p{Lt}", r"\p{Lm}",
    r"\p{Lo}",
];

struct Parser<'a> {
    src: &'a str,
    chars: Vec<char>,
    pos: usize,
    collapsed: bool,
}

impl Parser<'_> {
    fn err(&self, what: &str) -> Error {
        Error::Model(format!(
            "pre-tokenizer regex {:?}: {what} at offset {}",
            self.src, self.pos
        ))
    }
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }
    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }
    fn next(&mut self) -> Result<char> {
        let c = self.peek().ok_or_else(|| self.err("unexpected end"))?;
        self.pos += 1;
        Ok(c)
    }

    fn alt(&mut self) -> Result<Node> {
        let mut alts = vec![self.concat()?];
        while self.eat('|') {
            alts.push(self.concat()?);
        }
        Ok(if alts.len() == 1 {
            alts.pop().unwrap_or(Node::Concat(Vec::new()))
        } else {
            Node::Alt(alts)
        })
    }

    fn concat(&mut self) -> Result<Node> {
        let mut seq = Vec::new();
        while let Some(c) = self.peek() {
            if c == '|' || c == ')' {
                break;
            }
            let atom = self.atom()?;
            let atom = self.quantified(atom)?;
            seq.push(atom);
        }
        Ok(Node::Concat(seq))
    }

    fn number(&mut self) -> Option<u32> {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        if self.pos == start {
            return None;
        }
        self.chars[start..self.pos]
            .iter()
            .collect::<String>()
            .parse()
            .ok()
    }

    fn quantified(&mut self, atom: Node) -> Result<Node> {
        let (min, max) = match self.peek() {
            Some('*') => (0, None),
            Some('+') => (1, None),
            Some('?') => (0, Some(1)),
            Some('{') => {
                self.pos += 1;
                let min = self.number().ok_or_else(|| self.err("bad {} quantifier"))?;
                let max = if self.eat(',') {
                    if self.peek() == Some('}') {
                        None
                    } else {
                        Some(self.number().ok_or_else(|| self.err("bad {} quantifier"))?)
                    }
                } else {
                    Some(min)
                };
                if !self.eat('}') || max.is_some_and(|m| m < min) {
                    return Err(self.err("bad {} quantifier"));
                }
                if max.unwrap_or(min) > 4096 {
                    return Err(self.err("repetition count too large"));
                }
                self.pos -= 1; // the '}' is consumed below like the one-char quantifiers
                (min, max)
            }
            _ => return Ok(atom),
        };
        self.pos += 1;
        if matches!(
            atom,
            Node::Start | Node::End | Node::WordBoundary(_) | Node::Look(..)
        ) {
            return Err(self.err("quantifier on an assertion"));
        }
        let greedy = !self.eat('?');
        if matches!(self.peek(), Some('+')) {
            return Err(self.err("possessive quantifiers are not supported"));
        }
        if matches!(self.peek(), Some('*' | '?' | '{')) {
            return Err(self.err("nothing to repeat"));
        }
        Ok(Node::Repeat {
            node: Box::new(atom),
            min,
            max,
            greedy,
        })
    }

    fn literal(&self, c: char) -> Result<u32> {
        if self.collapsed && !c.is_ascii() {
            return Err(
                self.err("non-ASCII characters together with Unicode categories are not supported")
            );
        }
        Ok(c as u32)
    }

    fn atom(&mut self) -> Result<Node> {
        let c = self.next()?;
        Ok(match c {
            '(' => {
                let look = if self.eat('?') {
                    match self.next()? {
                        ':' => None,
                        '=' => Some(false),
                        '!' => Some(true),
                        '<' => {
                            return Err(self.err("lookbehind and named groups are not supported"))
                        }
                        _ => return Err(self.err("inline flags / unknown group are not supported")),
                    }
                } else {
                    None
                };
                let inner = self.alt()?;
                if !self.eat(')') {
                    return Err(self.err("missing )"));
                }
                match look {
                    Some(neg) => Node::Look(Box::new(inner), neg),
                    None => inner,
                }
            }
            ')' => return Err(self.err("unbalanced )")),
            '[' => Node::Class(self.class()?),
            '.' => Node::Any,
            '^' => Node::Start,
            '$' => Node::End,
            '*' | '+' | '?' => return Err(self.err("nothing to repeat")),
            '{' => return Err(self.err("unescaped {")),
            '\\' => match self.escape(false)? {
                Esc::Char(c) => Node::Char(c),
                Esc::Items(items) => Node::Class(Class {
                    negate: false,
                    items,
                }),
                Esc::WordBoundary(neg) => Node::WordBoundary(neg),
            },
            c => Node::Char(self.literal(c)?),
        })
    }

    fn hex(&mut self, n: usize) -> Result<u32> {
        let mut v = 0u32;
        for _ in 0..n {
            let d = self
                .next()?
                .to_digit(16)
                .ok_or_else(|| self.err("bad hex escape"))?;
            v = v * 16 + d;
        }
        Ok(v)
    }

    fn escape(&mut self, in_class: bool) -> Result<Esc> {
        let c = self.next()?;
        Ok(match c {
            's' => Esc::Items(vec![Item::Space(false)]),
            'S' => Esc::Items(vec![Item::Space(true)]),
            'd' => Esc::Items(vec![Item::Digit(false)]),
            'D' => Esc::Items(vec![Item::Digit(true)]),
            'w' => Esc::Items(vec![Item::Word(false)]),
            'W' => Esc::Items(vec![Item::Word(true)]),
            'b' if in_class => Esc::Char(0x08),
            'b' => Esc::WordBoundary(false),
            'B' if !in_class => Esc::WordBoundary(true),
            'r' => Esc::Char(0x0D),
            'n' => Esc::Char(0x0A),
            't' => Esc::Char(0x09),
            'f' => Esc::Char(0x0C),
            'v' => Esc::Char(0x0B),
            '0' => Esc::Char(0),
            'x' => Esc::Char(self.hex(2)?),
            'u' => Esc::Char(self.hex(4)?),
            'p' | 'P' => {
                if !self.eat('{') {
                    return Err(self.err("bad \\p escape"));
                }
                let start = self.pos;
                while self.peek().is_some_and(|c| c != '}') {
                    self.pos += 1;
                }
                let name: String = self.chars[start..self.pos].iter().collect();
                if !self.eat('}') {
                    return Err(self.err("bad \\p escape"));
                }
                let items = if self.collapsed && c == 'p' {
                    category_items(&name)
                } else {
                    None
                }
                .ok_or_else(|| self.err(&format!("unsupported class \\{c}{{{name}}}")))?;
                Esc::Items(items)
            }
            '1'..='9' => return Err(self.err("backreferences are not supported")),
            c if c.is_ascii_punctuation() => Esc::Char(c as u32),
            _ => return Err(self.err(&format!("unsupported escape \\{c}"))),
        })
    }

    fn class_atom(&mut self) -> Result<Esc> {
        match self.next()? {
            '\\' => self.escape(true),
            c => Ok(Esc::Char(self.literal(c)?)),
        }
    }

    fn class(&mut self) -> Result<Class> {
        let negate = self.eat('^');
        let mut items = Vec::new();
        let mut first = true;
        loop {
            match self.peek() {
                None => return Err(self.err("missing ]")),
                Some(']') if !first => {
                    self.pos += 1;
                    break;
                }
                _ => {}
            }
            first = false;
            let lo = self.class_atom()?;
            // A range needs a '-' that is not the last character of the class.
            if self.peek() == Some('-') && self.chars.get(self.pos + 1).is_some_and(|&c| c != ']') {
                self.pos += 1;
                let hi = self.class_atom()?;
                match (lo, hi) {
                    (Esc::Char(a), Esc::Char(b)) if a <= b => items.push(Item::Range(a, b)),
                    (Esc::Char(_), Esc::Char(_)) => return Err(self.err("bad range")),
                    _ => return Err(self.err("class escape in a range")),
                }
                continue;
            }
            match lo {
                Esc::Char(a) => items.push(Item::Range(a, a)),
                Esc::Items(v) => items.extend(v),
                Esc::WordBoundary(_) => return Err(self.err("bad class item")),
            }
        }
        Ok(Class { negate, items })
    }
}

enum Esc {
    Char(u32),
    Items(Vec<Item>),
    WordBoundary(bool),
}

#[derive(Clone, Debug)]
enum Inst {
    Char(u32),
    Class(Class),
    Any,
    Start,
    End,
    WordBoundary(bool),
    /// Try `.0` first, `.1` on backtrack.
    Split(usize, usize),
    Jmp(usize),
    /// Remember the position in a loop slot (restored on backtrack).
    Save(usize),
    /// Fail if the loop body just matched the empty string (ECMAScript's rule).
    Progress(usize),
    /// Run the sub-program at `.0`; continue if it matched, or if it didn't when `.1` (negated).
    Look(usize, bool),
    Match,
}

struct Compiler {
    prog: Vec<Inst>,
    slots: usize,
    pending: Vec<(usize, Node)>,
}

impl Compiler {
    fn emit(&mut self, i: Inst) -> usize {
        self.prog.push(i);
        self.prog.len() - 1
    }

    fn node(&mut self, n: &Node) {
        match n {
            Node::Char(c) => {
                self.emit(Inst::Char(*c));
            }
            Node::Class(c) => {
                self.emit(Inst::Class(c.clone()));
            }
            Node::Any => {
                self.emit(Inst::Any);
            }
            Node::Start => {
                self.emit(Inst::Start);
            }
            Node::End => {
                self.emit(Inst::End);
            }
            Node::WordBoundary(neg) => {
                self.emit(Inst::WordBoundary(*neg));
            }
            Node::Concat(v) => v.iter().for_each(|x| self.node(x)),
            Node::Alt(alts) => {
                let mut jumps = Vec::new();
                for (i, a) in alts.iter().enumerate() {
                    if i + 1 < alts.len() {
                        let split = self.emit(Inst::Split(0, 0));
                        self.node(a);
                        jumps.push(self.emit(Inst::Jmp(0)));
                        let next = self.prog.len();
                        self.prog[split] = Inst::Split(split + 1, next);
                    } else {
                        self.node(a);
                    }
                }
                let end = self.prog.len();
                for j in jumps {
                    self.prog[j] = Inst::Jmp(end);
                }
            }
            Node::Look(inner, neg) => {
                // The sub-program is laid out after the main one (see `compile`).
                let at = self.emit(Inst::Look(0, *neg));
                self.pending.push((at, (**inner).clone()));
            }
            Node::Repeat {
                node,
                min,
                max,
                greedy,
            } => {
                for _ in 0..*min {
                    self.node(node);
                }
                match max {
                    None => {
                        let slot = self.slots;
                        self.slots += 1;
                        let split = self.emit(Inst::Split(0, 0));
                        self.emit(Inst::Save(slot));
                        self.node(node);
                        self.emit(Inst::Progress(slot));
                        self.emit(Inst::Jmp(split));
                        let exit = self.prog.len();
                        self.prog[split] = if *greedy {
                            Inst::Split(split + 1, exit)
                        } else {
                            Inst::Split(exit, split + 1)
                        };
                    }
                    Some(max) => {
                        let mut splits = Vec::new();
                        for _ in *min..*max {
                            let slot = self.slots;
                            self.slots += 1;
                            splits.push(self.emit(Inst::Split(0, 0)));
                            self.emit(Inst::Save(slot));
                            self.node(node);
                            self.emit(Inst::Progress(slot));
                        }
                        let exit = self.prog.len();
                        for s in splits {
                            self.prog[s] = if *greedy {
                                Inst::Split(s + 1, exit)
                            } else {
                                Inst::Split(exit, s + 1)
                            };
                        }
                    }
                }
            }
        }
    }
}

/// A compiled pre-tokenizer expression.
#[derive(Clone, Debug)]
pub(crate) struct Regex {
    prog: Vec<Inst>,
    slots: usize,
    collapsed: bool,
}

enum Frame {
    Try(usize, usize),
    Restore(usize, usize),
}

/// The search gave up (step budget spent).
#[derive(Debug)]
pub(crate) struct Budget;

impl Regex {
    /// Parses `src`; unsupported constructs are an error.
    pub fn new(src: &str) -> Result<Regex> {
        let collapsed = CATEGORY_NAMES.iter().any(|c| src.contains(c));
        let mut p = Parser {
            src,
            chars: src.chars().collect(),
            pos: 0,
            collapsed,
        };
        let ast = p.alt()?;
        if p.pos != p.chars.len() {
            return Err(p.err("unbalanced )"));
        }
        let mut c = Compiler {
            prog: Vec::new(),
            slots: 0,
            pending: Vec::new(),
        };
        c.node(&ast);
        c.emit(Inst::Match);
        while let Some((at, node)) = c.pending.pop() {
            let start = c.prog.len();
            if let Inst::Look(_, neg) = c.prog[at] {
                c.prog[at] = Inst::Look(start, neg);
            }
            c.node(&node);
            c.emit(Inst::Match);
        }
        Ok(Regex {
            prog: c.prog,
            slots: c.slots,
            collapsed,
        })
    }

    /// The text as this expression sees it (see the module docs).
    pub fn prepare(&self, cpts: &[char]) -> Vec<u32> {
        cpts.iter()
            .map(|&c| {
                let cp = c as u32;
                if cp < 0x80 {
                    return cp;
                }
                let f = unicode::flags(c);
                if f.whitespace {
                    VT
                } else if !self.collapsed {
                    cp
                } else if f.number {
                    M_NUMBER
                } else if f.letter {
                    M_LETTER
                } else if f.punctuation {
                    M_PUNCT
                } else if f.accent_mark {
                    M_MARK
                } else if f.symbol {
                    M_SYMBOL
                } else {
                    M_OTHER
                }
            })
            .collect()
    }

    /// Runs the program at `pc` anchored at `pos`; the end of the first match in priority order.
    fn run(
        &self,
        text: &[u32],
        pc0: usize,
        pos0: usize,
        not_null: bool,
        steps: &mut u64,
    ) -> std::result::Result<Option<usize>, Budget> {
        let mut slots = vec![usize::MAX; self.slots];
        let mut stack: Vec<Frame> = Vec::new();
        let (mut pc, mut pos) = (pc0, pos0);
        loop {
            *steps += 1;
            if *steps > STEP_BUDGET {
                return Err(Budget);
            }
            let ok = match &self.prog[pc] {
                Inst::Char(c) => {
                    let ok = text.get(pos) == Some(c);
                    pos += 1;
                    ok
                }
                Inst::Class(cls) => {
                    let ok = text.get(pos).is_some_and(|&c| cls.matches(c));
                    pos += 1;
                    ok
                }
                Inst::Any => {
                    let ok = text.get(pos).is_some_and(|&c| c != 0x0A && c != 0x0D);
                    pos += 1;
                    ok
                }
                Inst::Start => pos == 0,
                Inst::End => pos == text.len(),
                Inst::WordBoundary(neg) => {
                    let before = pos > 0 && is_word(text[pos - 1]);
                    let after = text.get(pos).is_some_and(|&c| is_word(c));
                    (before != after) != *neg
                }
                Inst::Split(a, b) => {
                    stack.push(Frame::Try(*b, pos));
                    pc = *a;
                    continue;
                }
                Inst::Jmp(a) => {
                    pc = *a;
                    continue;
                }
                Inst::Save(s) => {
                    stack.push(Frame::Restore(*s, slots[*s]));
                    slots[*s] = pos;
                    true
                }
                Inst::Progress(s) => slots[*s] != pos,
                Inst::Look(sub, neg) => {
                    let hit = self.run(text, *sub, pos, false, steps)?.is_some();
                    hit != *neg
                }
                Inst::Match => {
                    if !(not_null && pos == pos0) {
                        return Ok(Some(pos));
                    }
                    false
                }
            };
            if ok {
                pc += 1;
                continue;
            }
            // Backtrack.
            loop {
                match stack.pop() {
                    None => return Ok(None),
                    Some(Frame::Restore(s, v)) => slots[s] = v,
                    Some(Frame::Try(a, p)) => {
                        pc = a;
                        pos = p;
                        break;
                    }
                }
            }
        }
    }

    /// Splits `text` (prepared) the way `std::regex_iterator` walks it: each match and each
    /// stretch between matches is a piece; an empty match only marks a split point.
    /// Pushes the split points (exclusive ends, relative to `text`) into `cuts`.
    pub fn split_points(
        &self,
        text: &[u32],
        cuts: &mut Vec<usize>,
    ) -> std::result::Result<(), Budget> {
        let n = text.len();
        let mut steps = 0u64;
        let mut from = 0usize;
        let mut not_null_at: Option<usize> = None;
        loop {
            // After an empty match at `p`, first try a non-empty match anchored at `p`.
            let found = if let Some(p) = not_null_at.take() {
                match self.run(text, 0, p, true, &mut steps)? {
                    Some(e) => Some((p, e)),
                    None => {
                        if p >= n {
                            return Ok(());
                        }
                        from = p + 1;
                        self.search(text, from, &mut steps)?
                    }
                }
            } else {
                self.search(text, from, &mut steps)?
            };
            let Some((s, e)) = found else { return Ok(()) };
            cuts.push(s);
            cuts.push(e);
            if s == e {
                if s >= n {
                    return Ok(());
                }
                not_null_at = Some(s);
            } else {
                from = e;
            }
        }
    }

    fn search(
        &self,
        text: &[u32],
        from: usize,
        steps: &mut u64,
    ) -> std::result::Result<Option<(usize, usize)>, Budget> {
        for s in from..=text.len() {
            if let Some(e) = self.run(text, 0, s, false, steps)? {
                return Ok(Some((s, e)));
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(re: &str, text: &str) -> Vec<String> {
        let re = Regex::new(re).unwrap();
        let cpts: Vec<char> = text.chars().collect();
        let mut cuts = vec![0];
        re.split_points(&re.prepare(&cpts), &mut cuts).unwrap();
        cuts.push(cpts.len());
        cuts.dedup();
        cuts.windows(2)
            .map(|w| cpts[w[0]..w[1]].iter().collect())
            .collect()
    }

    #[test]
    fn basics() {
        assert_eq!(pieces(r"\p{N}{1,3}", "a12345b"), ["a", "123", "45", "b"]);
        assert_eq!(pieces(r"\s+(?!\S)|\s+", "a   b"), ["a", "  ", " ", "b"]);
        assert_eq!(pieces(r"[^\n]+|[\n]+", "ab\n\ncd"), ["ab", "\n\n", "cd"]);
        // Alternation is ordered, not longest.
        assert_eq!(pieces("a|ab", "ab"), ["a", "b"]);
        // Lazy quantifier.
        assert_eq!(pieces("a+?", "aaa"), ["a", "a", "a"]);
        // Empty matches split (superbpe's digit grouping).
        assert_eq!(
            pieces(r"(?=(\d{3})+(?!\d))", "1234567"),
            ["1", "234", "567"]
        );
        // `$` is the end of the chunk.
        assert_eq!(pieces(r"\s+$", "a  b  "), ["a  b", "  "]);
        // Collapsed: \p{L} matches non-ASCII letters, cases are not told apart.
        assert_eq!(pieces(r"\p{Lu}+", "abÉé1"), ["abÉé", "1"]);
        // Wide mode: literal ranges of code points.
        assert_eq!(pieces("[一-龥]+", "ab中文c"), ["ab", "中文", "c"]);
        // Non-ASCII white space is \s.
        assert_eq!(pieces(r"\s", "a\u{3000}b"), ["a", "\u{3000}", "b"]);
    }

    #[test]
    fn catastrophic_backtracking_stops_at_the_budget() {
        let re = Regex::new("(a*)*b").unwrap();
        let text: Vec<char> = "a".repeat(40).chars().collect();
        let mut cuts = Vec::new();
        assert!(re.split_points(&re.prepare(&text), &mut cuts).is_err());
    }

    #[test]
    fn unsupported_is_an_error() {
        for re in [
            r"(?<=a)b",
            r"(?i:ab)",
            r"a++",
            r"(a)\1",
            r"\p{Han}+",
            r"[\p{L}é]",
            r"(?<n>a)",
            r"a{2",
            r"(ab",
            r"ab)",
            r"[ab",
            r"\q",
            r"*a",
        ] {
            assert!(Regex::new(re).is_err(), "{re}");
        }
    }
}
