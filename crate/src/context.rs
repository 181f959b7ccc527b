//! The arena of tensor descriptors and the op constructors that build graphs.
//!
//! Every constructor checks shapes and types and returns a `Result`, so a bad model or a wrong
//! call fails while the graph is built, never inside a kernel. The arena can be cut back to a mark
//! (`mark` / `reset_to`), so per-step graphs are built on top of long-lived weights without
//! reallocating them — ggml's pattern of one weights context plus a fresh graph context per step.

use crate::tensor::{
    contiguous_strides, Flags, Op, Tensor, TensorData, TensorId, MAX_DIMS, MAX_NAME, MAX_SRC,
};
use crate::{DType, Error, Result};

/// Arena of tensors.
#[derive(Debug, Clone, Default)]
pub struct Context {
    tensors: Vec<Tensor>,
}

/// A position in the arena to cut back to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark(usize);

impl Context {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    pub fn mark(&self) -> Mark {
        Mark(self.tensors.len())
    }

    /// Drop every tensor created after `mark`.
    pub fn reset_to(&mut self, mark: Mark) {
        self.tensors.truncate(mark.0);
    }

    pub fn tensor(&self, id: TensorId) -> &Tensor {
        &self.tensors[id.index()]
    }

    pub fn tensor_mut(&mut self, id: TensorId) -> &mut Tensor {
        &mut self.tensors[id.index()]
    }

    /// Checked lookup for ids that come from outside (e.g. JS).
    pub fn get(&self, id: TensorId) -> Result<&Tensor> {
        self.tensors
            .get(id.index())
            .ok_or_else(|| Error::InvalidArgument(format!("no tensor with id {}", id.0)))
    }

    pub fn ids(&self) -> impl Iterator<Item = TensorId> {
        (0..self.tensors.len() as u32).map(TensorId)
    }

    /// Find a tensor by name (linear; for tools and tests).
    pub fn find(&self, name: &str) -> Option<TensorId> {
        self.tensors
            .iter()
            .position(|t| t.name == name)
            .map(|i| TensorId(i as u32))
    }

    pub(crate) fn push(&mut self, t: Tensor) -> TensorId {
        let id = TensorId(self.tensors.len() as u32);
        self.tensors.push(t);
        id
    }

    /// A new tensor of `dtype` and shape `ne` (1 to 4 dims, innermost first).
    pub fn new_tensor(&mut self, dtype: DType, ne: &[usize]) -> Result<TensorId> {
        let ne4 = shape4(ne)?;
        check_block(dtype, ne4[0])?;
        checked_nelements(&ne4)?;
        checked_contiguous_bytes(dtype, &ne4)?;
        Ok(self.push(Tensor::contiguous(dtype, ne4)))
    }

    pub fn new_tensor_1d(&mut self, dtype: DType, ne0: usize) -> Result<TensorId> {
        self.new_tensor(dtype, &[ne0])
    }
    pub fn new_tensor_2d(&mut self, dtype: DType, ne0: usize, ne1: usize) -> Result<TensorId> {
        self.new_tensor(dtype, &[ne0, ne1])
    }
    pub fn new_tensor_3d(
        &mut self,
        dtype: DType,
        ne0: usize,
        ne1: usize,
        ne2: usize,
    ) -> Result<TensorId> {
        self.new_tensor(dtype, &[ne0, ne1, ne2])
    }
    pub fn new_tensor_4d(&mut self, dtype: DType, ne: [usize; 4]) -> Result<TensorId> {
        self.new_tensor(dtype, &ne)
    }

    pub fn set_name(&mut self, id: TensorId, name: &str) -> Result<TensorId> {
        if name.len() > MAX_NAME {
            return Err(Error::InvalidArgument(format!(
                "tensor name '{name}' is longer than {MAX_NAME} bytes"
            )));
        }
        self.tensor_mut(id).name = name.to_string();
        Ok(id)
    }

    pub fn set_input(&mut self, id: TensorId) {
        self.tensor_mut(id).flags.insert(Flags::INPUT);
    }
    pub fn set_output(&mut self, id: TensorId) {
        self.tensor_mut(id).flags.insert(Flags::OUTPUT);
    }
    pub fn set_param(&mut self, id: TensorId) {
        self.tensor_mut(id).flags.insert(Flags::PARAM);
    }
    pub fn set_data(&mut self, id: TensorId, data: TensorData) {
        self.tensor_mut(id).data = Some(data);
    }

    /// A new op result of `dtype`/`ne` computed from `srcs`.
    pub(crate) fn new_op(
        &mut self,
        op: Op,
        dtype: DType,
        ne: [usize; MAX_DIMS],
        srcs: &[TensorId],
    ) -> Result<TensorId> {
        check_block(dtype, ne[0])?;
        checked_nelements(&ne)?;
        checked_contiguous_bytes(dtype, &ne)?;
        let mut t = Tensor::contiguous(dtype, ne);
        t.op = op;
        debug_assert!(srcs.len() <= MAX_SRC);
        for (slot, s) in t.src.iter_mut().zip(srcs) {
            *slot = Some(*s);
        }
        Ok(self.push(t))
    }

    /// A view of `src` with the given shape, strides and byte offset.
    fn new_view(
        &mut self,
        op: Op,
        src: TensorId,
        ne: [usize; MAX_DIMS],
        nb: [usize; MAX_DIMS],
        offset: usize,
    ) -> Result<TensorId> {
        let s = self.tensor(src);
        let dtype = s.dtype;
        check_block(dtype, ne[0])?;
        checked_nelements(&ne)?;
        // A view shares the data of the tensor that owns it.
        let (base, base_offs) = match s.view_src {
            Some(v) => (v, s.view_offs.checked_add(offset)),
            None => (src, Some(offset)),
        };
        let overflow = || Error::Overflow(format!("view {ne:?} / {nb:?} at offset {offset}"));
        let base_offs = base_offs.ok_or_else(overflow)?;
        // Kernels read plain types through typed slices: their views must stay aligned.
        if !dtype.is_quantized() {
            let align = dtype.type_size();
            let strides_ok = (0..MAX_DIMS).all(|i| ne[i] <= 1 || nb[i].is_multiple_of(align));
            if !base_offs.is_multiple_of(align) || !strides_ok {
                return Err(Error::Shape(format!(
                    "{dtype} view at byte offset {base_offs} with strides {nb:?}: \
                     offsets and strides must be multiples of {align}"
                )));
            }
        }
        // The view must stay inside its base (checked: offsets and strides may come from JS).
        let span = checked_span(dtype, &ne, &nb).ok_or_else(overflow)?;
        let base_bytes = self.tensor(base).nbytes();
        // An empty view too: its offset still makes a pointer into the base (found by fuzzing:
        // an empty view at offset 2^63 - 1).
        if base_offs
            .checked_add(span)
            .is_none_or(|end| end > base_bytes)
        {
            return Err(Error::Shape(format!(
                "view of {span} bytes at offset {base_offs} exceeds its source of {base_bytes} bytes"
            )));
        }
        let mut t = Tensor::contiguous(dtype, ne);
        t.nb = nb;
        t.op = op;
        t.src[0] = Some(src);
        t.view_src = Some(base);
        t.view_offs = base_offs;
        Ok(self.push(t))
    }

    /// Same data, new shape; `a` must be contiguous and the element count unchanged.
    pub fn reshape(&mut self, a: TensorId, ne: &[usize]) -> Result<TensorId> {
        let ne4 = shape4(ne)?;
        let t = self.tensor(a);
        if !t.is_contiguous() {
            return Err(Error::Shape(
                "reshape of a non-contiguous tensor (use cont first)".into(),
            ));
        }
        if checked_nelements(&ne4)? != t.nelements() {
            return Err(Error::Shape(format!(
                "reshape {:?} -> {:?} changes the element count",
                t.ne, ne4
            )));
        }
        let nb = contiguous_strides(t.dtype, ne4);
        self.new_view(Op::Reshape, a, ne4, nb, 0)
    }

    /// A view with shape `ne`, row strides `nb[1..]` (nb[0] is the type size) at byte `offset`.
    pub fn view(
        &mut self,
        a: TensorId,
        ne: &[usize],
        nb_rest: &[usize],
        offset: usize,
    ) -> Result<TensorId> {
        let ne4 = shape4(ne)?;
        if nb_rest.len() + 1 != ne.len() {
            return Err(Error::InvalidArgument(format!(
                "view with {} dims needs {} strides, got {}",
                ne.len(),
                ne.len() - 1,
                nb_rest.len()
            )));
        }
        let dtype = self.tensor(a).dtype;
        let mut nb = [dtype.type_size(); MAX_DIMS];
        nb[1..ne.len()].copy_from_slice(nb_rest);
        // Strides of trailing unit dims follow the last given one, as ggml's view_Nd (checked:
        // both factors come from the caller).
        for i in ne.len()..MAX_DIMS {
            let n = if i == 1 {
                ne4[0] / dtype.block_size()
            } else {
                ne4[i - 1]
            };
            nb[i] = nb[i - 1]
                .checked_mul(n)
                .ok_or_else(|| Error::Overflow(format!("view strides of {ne:?}")))?;
        }
        self.new_view(Op::View, a, ne4, nb, offset)
    }

    /// Reorder axes: axis i of `a` becomes axis `axes[i]` of the result (ggml_permute).
    pub fn permute(&mut self, a: TensorId, axes: [usize; 4]) -> Result<TensorId> {
        let mut seen = [false; 4];
        for &ax in &axes {
            if ax >= 4 || seen[ax] {
                return Err(Error::InvalidArgument(format!(
                    "invalid permutation {axes:?}"
                )));
            }
            seen[ax] = true;
        }
        let t = self.tensor(a);
        if t.dtype.is_quantized() && axes[0] != 0 {
            return Err(Error::Shape(
                "permuting the block axis of a quantized tensor".into(),
            ));
        }
        let mut ne = [0; 4];
        let mut nb = [0; 4];
        for i in 0..4 {
            ne[axes[i]] = t.ne[i];
            nb[axes[i]] = t.nb[i];
        }
        self.new_view(Op::Permute(axes), a, ne, nb, 0)
    }

    /// Swap the first two axes.
    pub fn transpose(&mut self, a: TensorId) -> Result<TensorId> {
        let t = self.tensor(a);
        if t.dtype.is_quantized() {
            return Err(Error::Shape("transpose of a quantized tensor".into()));
        }
        let mut ne = t.ne;
        let mut nb = t.nb;
        ne.swap(0, 1);
        nb.swap(0, 1);
        self.new_view(Op::Transpose, a, ne, nb, 0)
    }

    /// A contiguous copy of `a` (same type).
    pub fn cont(&mut self, a: TensorId) -> Result<TensorId> {
        let t = self.tensor(a);
        let (dtype, ne) = (t.dtype, t.ne);
        self.new_op(Op::Cont, dtype, ne, &[a])
    }

    /// A contiguous copy of `a` with a new shape (same element count).
    pub fn cont_reshape(&mut self, a: TensorId, ne: &[usize]) -> Result<TensorId> {
        let c = self.cont(a)?;
        self.reshape(c, ne)
    }

    /// A contiguous copy of `a` converted to `dtype`.
    pub fn cast(&mut self, a: TensorId, dtype: DType) -> Result<TensorId> {
        let ne = self.tensor(a).ne;
        self.new_op(Op::Cont, dtype, ne, &[a])
    }

    /// A copy of `a` (same type, contiguous).
    pub fn dup(&mut self, a: TensorId) -> Result<TensorId> {
        let t = self.tensor(a);
        let (dtype, ne) = (t.dtype, t.ne);
        self.new_op(Op::Dup, dtype, ne, &[a])
    }

    /// Copy `a` into `b` (converting types); the result is a view of `b` and must be computed for
    /// the copy to happen (ggml_cpy).
    pub fn cpy(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        let (ta, tb) = (self.tensor(a), self.tensor(b));
        if ta.nelements() != tb.nelements() {
            return Err(Error::Shape(format!(
                "cpy {:?} into {:?}: element counts differ",
                ta.ne, tb.ne
            )));
        }
        let (ne, nb, dtype) = (tb.ne, tb.nb, tb.dtype);
        let (base, offs) = match tb.view_src {
            Some(v) => (v, tb.view_offs),
            None => (b, 0),
        };
        // A destination sharing bytes with its source would read what it already overwrote
        // (a permuted copy onto itself; found by fuzzing): rejected, as no order makes it right.
        let (src_base, src_offs) = ta.view_src.map_or((a, 0), |v| (v, ta.view_offs));
        if src_base == base
            && ta.nelements() > 0
            && src_offs < offs + tb.nbytes()
            && offs < src_offs + ta.nbytes()
        {
            return Err(Error::InvalidArgument(
                "cpy: the destination overlaps the source's memory".into(),
            ));
        }
        let mut t = Tensor::contiguous(dtype, ne);
        t.nb = nb;
        t.op = Op::Cpy;
        t.src[0] = Some(a);
        t.src[1] = Some(b);
        t.view_src = Some(base);
        t.view_offs = offs;
        Ok(self.push(t))
    }
}

/// Pad a shape to 4 dims; 1 to 4 dims accepted.
pub(crate) fn shape4(ne: &[usize]) -> Result<[usize; MAX_DIMS]> {
    if ne.is_empty() || ne.len() > MAX_DIMS {
        return Err(Error::Shape(format!(
            "a tensor has 1 to 4 dimensions, got {}",
            ne.len()
        )));
    }
    let mut out = [1usize; MAX_DIMS];
    out[..ne.len()].copy_from_slice(ne);
    Ok(out)
}

pub(crate) fn check_block(dtype: DType, ne0: usize) -> Result<()> {
    if !ne0.is_multiple_of(dtype.block_size()) {
        return Err(Error::Shape(format!(
            "ne[0] = {ne0} is not a multiple of {}'s block size {}",
            dtype,
            dtype.block_size()
        )));
    }
    Ok(())
}

/// Checks that a dense `dtype` tensor of shape `ne` and every one of its strides fit this
/// target's address space (u64 arithmetic: on wasm32 `usize` is 32 bits). Every tensor is
/// checked when it is created, so `Tensor::nbytes` and the strides cannot wrap afterwards.
pub(crate) fn checked_contiguous_bytes(dtype: DType, ne: &[usize; MAX_DIMS]) -> Result<usize> {
    let dims = [ne[0] / dtype.block_size(), ne[1], ne[2], ne[3]];
    // Zeros count as 1 here: an empty tensor's other dims must still fit, or the strides of a
    // permutation of it (zero dim last) would overflow.
    let mut bytes = dtype.type_size() as u64;
    for n in dims {
        bytes = bytes
            .checked_mul(n.max(1) as u64)
            .filter(|&b| b <= isize::MAX as u64)
            .ok_or_else(|| Error::Overflow(format!("byte size of a {dtype} tensor {ne:?}")))?;
    }
    Ok(if dims.contains(&0) { 0 } else { bytes as usize })
}

/// Bytes spanned by a tensor with strides `nb` (`Tensor::nbytes`' formula), or None when that
/// does not fit this target's address space.
fn checked_span(dtype: DType, ne: &[usize; MAX_DIMS], nb: &[usize; MAX_DIMS]) -> Option<usize> {
    if ne.contains(&0) {
        // No element, but kernels still form row addresses `i1·nb1 + i2·nb2 + i3·nb3` for the
        // indices of the non-empty dims (a [0, 2^40] view's rows, found by fuzzing): those must
        // stay inside the base too, so an empty view's strides count as well.
        let mut n = 0u64;
        for i in 1..MAX_DIMS {
            if ne[i] > 0 {
                n = n.checked_add((ne[i] as u64 - 1).checked_mul(nb[i] as u64)?)?;
            }
        }
        return usize::try_from(n)
            .ok()
            .filter(|&n| n <= isize::MAX as usize);
    }
    let bs = dtype.block_size() as u64;
    let mut n = if bs == 1 {
        (ne[0] as u64 - 1)
            .checked_mul(nb[0] as u64)?
            .checked_add(dtype.type_size() as u64)?
    } else {
        (ne[0] as u64 / bs).checked_mul(nb[0] as u64)?
    };
    for i in 1..MAX_DIMS {
        n = n.checked_add((ne[i] as u64 - 1).checked_mul(nb[i] as u64)?)?;
    }
    usize::try_from(n)
        .ok()
        .filter(|&n| n <= isize::MAX as usize)
}

pub(crate) fn checked_nelements(ne: &[usize; MAX_DIMS]) -> Result<usize> {
    ne.iter()
        .try_fold(1usize, |acc, &n| acc.checked_mul(n))
        .filter(|&n| n <= isize::MAX as usize)
        .ok_or_else(|| Error::Overflow(format!("element count of {ne:?}")))
}
