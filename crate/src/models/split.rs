//! Split GGUFs (llama.cpp's `gguf-split`): a model in N files named
//! `PREFIX-00001-of-0000N.gguf` … `PREFIX-0000N-of-0000N.gguf`, each with `split.no` (0-based),
//! `split.count` and `split.tensors.count`; the first holds the metadata, every part its own
//! tensors and data section.

use crate::gguf::Gguf;
use crate::{Error, Result};

/// `split.no` and `split.count` of a part; `None` for an unsplit file (or `split.count` = 1).
pub fn split_of(g: &Gguf) -> Result<Option<(usize, usize)>> {
    let Some(count) = g.get("split.count") else {
        return Ok(None);
    };
    let count = count
        .as_usize()
        .filter(|&n| (1..=99_999).contains(&n))
        .ok_or_else(|| Error::Gguf("split.count is not a count of 1..99999".into()))?;
    let no = g
        .get("split.no")
        .and_then(|v| v.as_usize())
        .filter(|&n| n < count)
        .ok_or_else(|| Error::Gguf(format!("split.no missing or not below split.count {count}")))?;
    Ok((count > 1).then_some((no, count)))
}

/// The path of part `i` (0-based) of `n`, given the first part's path.
pub fn part_path(first: &std::path::Path, i: usize, n: usize) -> Result<std::path::PathBuf> {
    let name = first
        .file_name()
        .and_then(|s| s.to_str())
        .ok_or_else(|| Error::InvalidArgument(format!("{}: not a file name", first.display())))?;
    let suffix = format!("-00001-of-{n:05}.gguf");
    let prefix = name.strip_suffix(&suffix).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "{name} is part 1 of {n} of a split model but not named PREFIX{suffix}"
        ))
    })?;
    Ok(first.with_file_name(format!("{prefix}-{:05}-of-{n:05}.gguf", i + 1)))
}

/// Memory-map `path` and, when it is the first part of a split model, the other parts; checks
/// their `split.*` keys and the total tensor count. One file: a vector of one.
#[cfg(not(target_arch = "wasm32"))]
pub fn open_parts(path: &std::path::Path) -> Result<Vec<std::sync::Arc<crate::gguf::GgufFile>>> {
    use std::sync::Arc;
    let first = Arc::new(crate::gguf::GgufFile::open(path)?);
    let Some((no, n)) = split_of(first.header())? else {
        return Ok(vec![first]);
    };
    if no != 0 {
        return Err(Error::InvalidArgument(format!(
            "{} is part {} of {n} of a split model: open part 1",
            path.display(),
            no + 1
        )));
    }
    let mut parts = vec![first];
    for i in 1..n {
        let p = part_path(path, i, n)?;
        let f = crate::gguf::GgufFile::open(&p)?;
        if split_of(f.header())? != Some((i, n)) {
            return Err(Error::Gguf(format!(
                "{}: split.no/split.count do not say part {} of {n}",
                p.display(),
                i + 1
            )));
        }
        parts.push(Arc::new(f));
    }
    let total: usize = parts.iter().map(|p| p.header().tensors.len()).sum();
    if let Some(want) = parts[0].header().get("split.tensors.count") {
        if want.as_usize() != Some(total) {
            return Err(Error::Gguf(format!(
                "split.tensors.count says {want:?}, the {n} parts hold {total} tensors"
            )));
        }
    }
    Ok(parts)
}
