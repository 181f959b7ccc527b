//! The streaming GGUF reader (what the browser loads models through): memory follows the bytes
//! that arrived, never a claim (Content-Length, header extents); claims over the budget, lying
//! lengths and truncated files are errors; a real file streams to exactly its bytes.

use ggweb::gguf::stream::FileStream;
use ggweb::gguf::{Gguf, GgufWriter};
use ggweb::{DType, Error};

const CNN: &[u8] = include_bytes!("../../crate/assets/mnist-cnn-f32.gguf");
const FC: &[u8] = include_bytes!("../../crate/assets/mnist-fc-f32.gguf");

/// Feed `bytes` in chunks of varying sizes.
fn feed(s: &mut FileStream, bytes: &[u8]) -> ggweb::Result<()> {
    let mut at = 0;
    let mut n = 7;
    while at < bytes.len() {
        let end = (at + n).min(bytes.len());
        s.push(&bytes[at..end])?;
        at = end;
        n = n * 3 % 70_001 + 1;
    }
    Ok(())
}

#[test]
fn real_files_stream_to_exactly_their_bytes() {
    for (file, known) in [(CNN, true), (CNN, false), (FC, true), (FC, false)] {
        let mut s = FileStream::new(true, known.then_some(file.len() as u64)).unwrap();
        feed(&mut s, file).unwrap();
        assert_eq!(s.finish().unwrap(), &Gguf::parse(file).unwrap());
        if known {
            // The last growth stops at the announced size: no slack for an honest file.
            assert_eq!(s.allocated(), file.len());
        } else {
            assert!(
                s.allocated() <= (2 * file.len()).max(64 << 10),
                "{}",
                s.allocated()
            );
        }
        let (_, bytes) = s.take_file().unwrap();
        assert_eq!(&bytes[..], file);
    }
}

#[test]
fn a_claimed_length_allocates_nothing_until_bytes_arrive() {
    // `new ModelStream(2**31 - 4096)` used to grow the wasm heap to 2 GiB at once.
    let mut s = FileStream::new(true, Some((1 << 31) - 4096)).unwrap();
    assert_eq!(s.allocated(), 0);
    s.push(&CNN[..4096]).unwrap();
    assert!(s.allocated() <= 64 << 10, "{}", s.allocated());
    // The header parses (its tensors lie inside the claimed length), but the file ends early.
    s.push(&CNN[4096..]).unwrap();
    assert!(s.allocated() <= 2 * CNN.len());
    let e = s.take_file().err().unwrap();
    assert!(e.to_string().contains("truncated"), "{e}");
}

#[test]
fn a_header_claiming_gigabytes_costs_only_its_bytes() {
    // A 1.6 GB tensor declared in a header of a few hundred bytes, length unknown.
    let mut w = GgufWriter::new();
    w.set("general.architecture", "llama");
    w.add_tensor_owned("big", DType::F32, &[1 << 10], vec![0; 4096])
        .unwrap();
    let mut file = w.to_bytes().unwrap();
    // Patch the tensor's dims in the header: ne0 = 400M elements (1.6 GB of f32).
    let pos = file
        .windows(8)
        .position(|x| x == (1u64 << 10).to_le_bytes())
        .unwrap();
    file[pos..pos + 8].copy_from_slice(&400_000_000u64.to_le_bytes());
    let mut s = FileStream::new(true, None).unwrap();
    feed(&mut s, &file).unwrap();
    assert!(s.header().is_some());
    assert!(s.allocated() <= 64 << 10, "{}", s.allocated());
    let e = s.finish().unwrap_err();
    assert!(matches!(e, Error::Gguf(_)), "{e}");
}

#[test]
fn claims_over_the_budget_are_errors_at_once() {
    let e = FileStream::with_budget(true, Some(10_000), 1000)
        .err()
        .unwrap();
    assert!(matches!(e, Error::OutOfMemory(_)), "{e}");
    // Unknown length: the header's claim is checked when it is complete.
    let mut s = FileStream::with_budget(true, None, 20_000).unwrap();
    let e = feed(&mut s, CNN).unwrap_err();
    assert!(matches!(e, Error::OutOfMemory(_)), "{e}");
    // Header only: the data is not kept, so a big file is fine.
    let mut s = FileStream::with_budget(false, Some(1 << 40), 1 << 20).unwrap();
    feed(&mut s, CNN).unwrap();
    assert!(s.header().is_some());
}

#[test]
fn lying_lengths_are_errors() {
    // More bytes than announced.
    let mut s = FileStream::new(true, Some(CNN.len() as u64 - 10)).unwrap();
    let e = feed(&mut s, CNN).unwrap_err();
    assert!(e.to_string().contains("the file has"), "{e}");
    // Fewer bytes than announced: truncated at take.
    let mut s = FileStream::new(true, Some(CNN.len() as u64 + 4096)).unwrap();
    feed(&mut s, CNN).unwrap();
    assert!(s
        .take_file()
        .err()
        .unwrap()
        .to_string()
        .contains("truncated"));
    // Unknown length, more bytes than the header's tensors account for (+ padding).
    let mut longer = CNN.to_vec();
    longer.extend_from_slice(&[0; 4096]);
    let mut s = FileStream::new(true, None).unwrap();
    let e = feed(&mut s, &longer).unwrap_err();
    assert!(e.to_string().contains("longer than expected"), "{e}");
}

#[test]
fn a_length_the_header_agrees_with_is_allocated_once() {
    let g = Gguf::parse(FC).unwrap();
    let header_end = g.data_offset as usize;
    let mut s = FileStream::new(true, Some(FC.len() as u64)).unwrap();
    s.push(&FC[..header_end]).unwrap();
    assert!(s.header().is_some());
    // Two claims agree (Content-Length and the validated tensor table): one allocation now.
    assert_eq!(s.allocated(), FC.len());
    s.push(&FC[header_end..]).unwrap();
    assert_eq!(&s.take_file().unwrap().1[..], FC);
}
