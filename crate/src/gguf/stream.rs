//! A GGUF file fed chunk by chunk in file order (a fetch body, Blob slices, a Node stream): the
//! header is parsed as soon as its bytes are in, and with `keep_data` the whole file lands in ONE
//! [`AlignedBytes`] allocation that models then use in place as weights (tensor data is copied
//! once, chunk → heap, and never assembled twice).
//!
//! Memory follows the bytes that arrived, not what one claim says: the allocation grows
//! geometrically (at most 2× what was received, never past the expected size) instead of being
//! sized up front from a Content-Length or a header's tensor extents, so a lying server or a
//! 128-byte header that claims gigabytes costs nothing until the bytes exist. Only when both
//! agree (a known length that the parsed, validated header's tensors fill up to the padding) is
//! the file allocated at once. Claims above the memory budget are an error at once.

use crate::backend::cpu::buffer::AlignedBytes;
use crate::gguf::{Gguf, HeaderParse};
use crate::{Error, Result};

/// What one stream may hold by default: wasm32's 4 GiB address space less room for the rest of
/// the engine (KV cache, compute buffers); natively far beyond any model.
pub const DEFAULT_BUDGET: u64 = if cfg!(target_pointer_width = "32") {
    0xF000_0000
} else {
    1 << 46
};

/// First allocation of a kept file (later ones double).
const FIRST_ALLOC: u64 = 64 << 10;

pub struct FileStream {
    keep_data: bool,
    budget: u64,
    /// The bytes until the header is complete when the data is not kept.
    head: Vec<u8>,
    /// With `keep_data`: every byte received so far.
    data: Option<AlignedBytes>,
    file_len: Option<u64>,
    needed: u64,
    header: Option<Gguf>,
    received: u64,
    /// Without `keep_data`: the file offset and bytes past the header that arrived with it.
    early: (u64, Vec<u8>),
}

/// The size of a file with header `g` as far as its tensors go.
pub fn data_end(g: &Gguf) -> u64 {
    g.data_offset.saturating_add(g.data_size())
}

/// [`data_end`] with the padding ggml writes after the last tensor.
fn padded_len(g: &Gguf) -> u64 {
    let align = g.alignment.max(1) as u64;
    data_end(g).div_ceil(align).saturating_mul(align)
}

fn over_budget(what: &str, n: u64, budget: u64) -> Error {
    Error::OutOfMemory(format!(
        "{what} of {n} bytes is over the memory budget of {budget} bytes"
    ))
}

impl FileStream {
    /// `file_len`: the total size when known (Content-Length, Blob.size). Nothing is allocated
    /// for it yet; a length over [`DEFAULT_BUDGET`] is an error at once.
    pub fn new(keep_data: bool, file_len: Option<u64>) -> Result<FileStream> {
        Self::with_budget(keep_data, file_len, DEFAULT_BUDGET)
    }

    /// [`FileStream::new`] holding at most `budget` bytes.
    pub fn with_budget(keep_data: bool, file_len: Option<u64>, budget: u64) -> Result<FileStream> {
        if let Some(n) = file_len.filter(|&n| keep_data && n > budget) {
            return Err(over_budget("a file", n, budget));
        }
        Ok(FileStream {
            keep_data,
            budget,
            head: Vec::new(),
            data: None,
            file_len,
            needed: 24,
            header: None,
            received: 0,
            early: (0, Vec::new()),
        })
    }

    /// The size the kept bytes should end at: the known length, else the header's claim.
    fn expected(&self) -> Option<u64> {
        self.file_len
            .or_else(|| self.header.as_ref().map(padded_len))
    }

    /// Room for `extra` more kept bytes: double the allocation (capped at the expected size).
    fn reserve(&mut self, extra: usize) -> Result<()> {
        let expected = self.expected();
        let budget = self.budget;
        let len = self.data.as_ref().map_or(0, |d| d.len()) as u64;
        let need = len + extra as u64;
        if let Some(e) = expected.filter(|&e| need > e) {
            return Err(Error::Gguf(format!(
                "the file is longer than expected: {need} bytes received, {e} expected"
            )));
        }
        if need > budget {
            return Err(over_budget("a file", need, budget));
        }
        let cap = self.data.as_ref().map_or(0, |d| d.capacity()) as u64;
        if need <= cap {
            return Ok(());
        }
        let grown = cap
            .saturating_mul(2)
            .max(FIRST_ALLOC)
            .min(expected.unwrap_or(u64::MAX))
            .min(budget)
            .max(need);
        let oom = || Error::OutOfMemory(format!("cannot hold {grown} bytes of a file in memory"));
        let grown_usize = usize::try_from(grown).map_err(|_| oom())?;
        match &mut self.data {
            Some(d) => d.reserve_total(grown_usize).map_err(|_| oom())?,
            None => self.data = Some(AlignedBytes::with_capacity(grown_usize).map_err(|_| oom())?),
        }
        Ok(())
    }

    /// Append the next bytes of the file; returns true once the header is parsed.
    pub fn push(&mut self, chunk: &[u8]) -> Result<bool> {
        if chunk.is_empty() {
            return Ok(self.header.is_some());
        }
        let received = self.received + chunk.len() as u64;
        if let Some(n) = self.file_len.filter(|&n| received > n) {
            return Err(Error::Gguf(format!(
                "received {received} bytes but the file has {n}"
            )));
        }
        if self.keep_data {
            self.reserve(chunk.len())?;
            match self.data.as_mut() {
                Some(d) => d.extend_from_slice(chunk)?,
                None => return Err(Error::OutOfMemory("no buffer for the file".into())),
            }
        } else if self.header.is_none() {
            if received > self.budget {
                return Err(over_budget("a GGUF header", received, self.budget));
            }
            self.head.try_reserve(chunk.len()).map_err(|_| {
                Error::OutOfMemory(format!("cannot hold {received} bytes in memory"))
            })?;
            self.head.extend_from_slice(chunk);
        }
        self.received = received;
        if self.header.is_some() {
            return Ok(true);
        }
        let have: &[u8] = match &self.data {
            Some(d) => d,
            None => &self.head,
        };
        if (have.len() as u64) < self.needed {
            return Ok(false);
        }
        let parsed = match self.file_len {
            Some(n) => Gguf::parse_header_with_len(have, n),
            None => Gguf::parse_header(have),
        }?;
        match parsed {
            HeaderParse::Complete(g) => {
                if self.keep_data && self.file_len.is_none() {
                    // The header's claim is checked against the budget now, and bounds what
                    // may still arrive; memory still grows only as bytes do.
                    let claim = padded_len(&g).max(have.len() as u64);
                    if claim > self.budget {
                        return Err(over_budget("a file (by its header)", claim, self.budget));
                    }
                }
                // A known length that the header's tensor table accounts for (up to ggml's
                // padding) is two claims that agree: allocate it once now, so an honest file
                // costs one allocation of its size instead of a growth sequence (in wasm, freed
                // smaller blocks rarely serve the next doubling: the heap would peak at ~1.6×).
                let agreed = self.file_len.filter(|&n| {
                    let end = padded_len(&g);
                    end <= n && n - end <= g.alignment.max(1) as u64
                });
                // Without kept data, the bytes past the header that came with it are held for
                // a consumer of the tensor data ([`FileStream::take_early_data`]).
                let mut head = std::mem::take(&mut self.head);
                let from = usize::try_from(g.data_offset).map_or(head.len(), |o| o.min(head.len()));
                head.drain(..from);
                head.shrink_to_fit();
                self.early = (from as u64, head);
                self.header = Some(g);
                if let (true, Some(n)) = (self.keep_data, agreed) {
                    let n =
                        usize::try_from(n).map_err(|_| over_budget("a file", n, self.budget))?;
                    if let Some(d) = self.data.as_mut() {
                        d.reserve_total(n).map_err(|_| {
                            Error::OutOfMemory(format!("cannot hold a file of {n} bytes in memory"))
                        })?;
                    }
                }
            }
            HeaderParse::NeedMore(n) => self.needed = n.max(have.len() as u64 + 1),
        }
        Ok(self.header.is_some())
    }

    /// Without `keep_data`, once the header is parsed: the bytes after it (from the data
    /// section's start, or the header's end when the padding is still to come) that arrived in
    /// the chunks that completed it, with their file offset; later chunks are the caller's.
    pub fn take_early_data(&mut self) -> (u64, Vec<u8>) {
        std::mem::take(&mut self.early)
    }

    pub fn received(&self) -> u64 {
        self.received
    }

    /// Bytes the header needs before parsing can get further.
    pub fn needed(&self) -> u64 {
        self.needed
    }

    pub fn file_len(&self) -> Option<u64> {
        self.file_len
    }

    /// Bytes allocated for the kept data so far.
    pub fn allocated(&self) -> usize {
        self.data.as_ref().map_or(0, |d| d.capacity())
    }

    pub fn header(&self) -> Option<&Gguf> {
        self.header.as_ref()
    }

    /// The total size once known (from the stream's creator, else from the header).
    pub fn total(&self) -> Option<u64> {
        self.file_len.or_else(|| self.header.as_ref().map(data_end))
    }

    /// At the end of the stream: the header must be complete and every tensor inside the bytes
    /// received (only the header's own claims without `keep_data` and a known length).
    pub fn finish(&self) -> Result<&Gguf> {
        let g = self.finish_header()?;
        match (&self.data, self.file_len) {
            (Some(d), _) => g.check_file_len(d.len() as u64)?,
            (None, Some(n)) if !self.keep_data => g.check_file_len(n)?,
            _ => {}
        }
        Ok(g)
    }

    fn finish_header(&self) -> Result<&Gguf> {
        self.header.as_ref().ok_or_else(|| {
            Error::Gguf(format!(
                "file of {} bytes is truncated: the header needs at least {} bytes",
                self.received, self.needed
            ))
        })
    }

    /// At the end of a stream whose data went elsewhere: [`FileStream::finish`]'s checks, then
    /// the header itself (moved out, not copied: a large vocabulary is megabytes).
    pub fn take_header(&mut self) -> Result<Gguf> {
        self.finish()?;
        self.header
            .take()
            .ok_or_else(|| Error::InvalidArgument("the header of this stream was taken".into()))
    }

    /// The parsed header and the whole file, for a model to use in place (once).
    pub fn take_file(&mut self) -> Result<(Gguf, std::sync::Arc<AlignedBytes>)> {
        if !self.keep_data {
            return Err(Error::InvalidArgument(
                "this GGUF was loaded with headerOnly: its tensor data was not kept".into(),
            ));
        }
        let g = self.finish_header()?.clone();
        let d = self.data.take().ok_or_else(|| {
            Error::InvalidArgument("the data of this GGUF stream was used".into())
        })?;
        if let Some(n) = self.file_len {
            if d.len() as u64 != n {
                return Err(Error::Gguf(format!(
                    "file truncated: received {} of {n} bytes",
                    d.len()
                )));
            }
        }
        g.check_file_len(d.len() as u64)?;
        Ok((g, std::sync::Arc::new(d)))
    }
}
