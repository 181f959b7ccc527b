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

/// Check that `g` is part `i` (0-based) of a model whose first part is `first`: part 1 must not
/// say another part, and every later one must say `split.no` = `i` of the same `split.count`.
/// Returns how many parts the model has (1 for an unsplit file).
pub fn check_part(first: &Gguf, g: &Gguf, i: usize) -> Result<usize> {
    let n = match split_of(first)? {
        None => 1,
        Some((0, n)) => n,
        Some((no, n)) => {
            return Err(Error::InvalidArgument(format!(
                "the first file is part {} of {n} of a split model: give part 1 first",
                no + 1
            )))
        }
    };
    if i >= n {
        return Err(Error::InvalidArgument(format!(
            "more files than the {n} parts split.count says"
        )));
    }
    if i > 0 && split_of(g)? != Some((i, n)) {
        return Err(Error::Gguf(format!(
            "file {}: split.no/split.count do not say part {} of {n}",
            i + 1,
            i + 1
        )));
    }
    Ok(n)
}

/// Check a whole split model's headers: every part present, in order, and the first part's
/// `split.tensors.count` equal to the tensors the parts hold.
pub fn check_parts(headers: &[&Gguf]) -> Result<()> {
    let first = headers
        .first()
        .ok_or_else(|| Error::InvalidArgument("no model files".into()))?;
    let mut n = 1;
    for (i, g) in headers.iter().enumerate() {
        n = check_part(first, g, i)?;
    }
    if headers.len() != n {
        return Err(Error::InvalidArgument(format!(
            "the model is split in {n} parts, {} given",
            headers.len()
        )));
    }
    let total: usize = headers.iter().map(|g| g.tensors.len()).sum();
    if let Some(want) = first.get("split.tensors.count") {
        if want.as_usize() != Some(total) {
            return Err(Error::Gguf(format!(
                "split.tensors.count says {want:?}, the {n} parts hold {total} tensors"
            )));
        }
    }
    Ok(())
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
        check_part(parts[0].header(), f.header(), i)
            .map_err(|e| Error::Gguf(format!("{}: {e}", p.display())))?;
        parts.push(Arc::new(f));
    }
    let headers: Vec<&Gguf> = parts.iter().map(|p| p.header()).collect();
    check_parts(&headers)?;
    Ok(parts)
}
