//! Reading and writing tensor data through their backend buffers.

use std::sync::Arc;

use crate::backend::cpu::repack::{self, Repacked};
use crate::backend::Buffer;
use crate::{Context, DType, Error, Result, TensorId};

impl Context {
    /// The buffer holding a tensor's bytes and their offset in it: the tensor's own data, or its
    /// view source's plus the view offset. `None` before the tensor (or its source) is allocated.
    pub fn data_location(&self, id: TensorId) -> Option<(&Arc<dyn Buffer>, usize)> {
        let t = self.get(id).ok()?;
        match (&t.data, t.view_src) {
            (Some(d), _) => Some((&d.buffer, d.offset)),
            (None, Some(v)) => {
                let d = self.get(v).ok()?.data.as_ref()?;
                Some((&d.buffer, d.offset + t.view_offs))
            }
            (None, None) => None,
        }
    }

    /// Where a contiguous tensor's `len` bytes are, checked for a transfer of `len` bytes.
    fn contiguous_location(
        &self,
        id: TensorId,
        what: &str,
        len: usize,
    ) -> Result<(&Arc<dyn Buffer>, usize)> {
        let t = self.get(id)?;
        if !t.is_contiguous() {
            return Err(Error::InvalidArgument(format!(
                "{what} of non-contiguous tensor '{}'",
                t.name
            )));
        }
        if len != t.nbytes() {
            return Err(Error::Shape(format!(
                "tensor '{}' holds {} bytes, got {len}",
                t.name,
                t.nbytes(),
            )));
        }
        self.located(id)
    }

    /// [`Context::data_location`], or an error naming the tensor.
    fn located(&self, id: TensorId) -> Result<(&Arc<dyn Buffer>, usize)> {
        if repack::is_repacked(self, id) == Repacked::View {
            return Err(repack::unsupported("reading a view", &self.tensor(id).name));
        }
        self.data_location(id).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "tensor '{}' has no data yet (allocate it first)",
                self.tensor(id).name
            ))
        })
    }

    /// Write the raw bytes of a contiguous tensor.
    pub fn set_bytes(&self, id: TensorId, bytes: &[u8]) -> Result<()> {
        let (buf, off) = self.contiguous_location(id, "set", bytes.len())?;
        match self.repacked(id, bytes) {
            Some(packed) => buf.set(off, &packed),
            None => buf.set(off, bytes),
        }
    }

    /// GGUF-layout `bytes` of a repacked tensor in its layout; None for any other tensor.
    fn repacked(&self, id: TensorId, bytes: &[u8]) -> Option<Vec<u8>> {
        let (s, nb, nrows) = repack::layout_of(self, id)?;
        let mut v = bytes.to_vec();
        repack::pack_matrix(s, nb, nrows, &mut v);
        Some(v)
    }

    /// A repacked tensor's bytes, as read from its buffer, into the GGUF layout.
    fn unpacked(&self, id: TensorId, bytes: &mut [u8]) {
        if let Some((s, nb, nrows)) = repack::layout_of(self, id) {
            repack::unpack_matrix(s, nb, nrows, bytes);
        }
    }

    /// [`Context::set_bytes`] without blocking (device buffers may need a read of edge words).
    pub async fn set_bytes_async(&self, id: TensorId, bytes: &[u8]) -> Result<()> {
        let (buf, off) = self.contiguous_location(id, "set", bytes.len())?;
        match self.repacked(id, bytes) {
            Some(packed) => buf.set_async(off, &packed).await,
            None => buf.set_async(off, bytes).await,
        }
    }

    /// Read the raw bytes of a contiguous tensor.
    pub fn get_bytes(&self, id: TensorId) -> Result<Vec<u8>> {
        let n = self.get(id)?.nbytes();
        let (buf, off) = self.contiguous_location(id, "get", n)?;
        let mut out = vec![0u8; n];
        buf.get(off, &mut out)?;
        self.unpacked(id, &mut out);
        Ok(out)
    }

    /// [`Context::get_bytes`] without blocking: the browser's way to read device memory.
    pub async fn get_bytes_async(&self, id: TensorId) -> Result<Vec<u8>> {
        let n = self.get(id)?.nbytes();
        let (buf, off) = self.contiguous_location(id, "get", n)?;
        let mut out = buf.get_async(off, n).await?;
        self.unpacked(id, &mut out);
        Ok(out)
    }

    /// Write f32 values, converting to the tensor's type (f32, f16, bf16 or a quantized type).
    pub fn set_f32(&self, id: TensorId, values: &[f32]) -> Result<()> {
        let t = self.get(id)?;
        if values.len() != t.nelements() {
            return Err(Error::Shape(format!(
                "tensor '{}' has {} elements, got {}",
                t.name,
                t.nelements(),
                values.len()
            )));
        }
        let bytes = match t.dtype {
            DType::F32 => bytemuck::cast_slice(values).to_vec(),
            dt => {
                let mut out = vec![0u8; dt.row_size(values.len())?];
                crate::backend::cpu::quantize_row(dt, values, &mut out)?;
                out
            }
        };
        self.set_bytes(id, &bytes)
    }

    /// Read the values as f32, converting from the tensor's type.
    pub fn get_f32(&self, id: TensorId) -> Result<Vec<f32>> {
        decode_f32(self.get(id)?.dtype, &self.get_bytes(id)?)
    }

    /// [`Context::get_f32`] without blocking.
    pub async fn get_f32_async(&self, id: TensorId) -> Result<Vec<f32>> {
        decode_f32(self.get(id)?.dtype, &self.get_bytes_async(id).await?)
    }

    /// Write i32 values into an i32 tensor (indices, positions).
    pub fn set_i32(&self, id: TensorId, values: &[i32]) -> Result<()> {
        let t = self.get(id)?;
        if t.dtype != DType::I32 {
            return Err(Error::InvalidArgument(format!(
                "tensor '{}' is {}, not i32",
                t.name, t.dtype
            )));
        }
        self.set_bytes(id, bytemuck::cast_slice(values))
    }

    /// Read an i32 tensor.
    pub fn get_i32(&self, id: TensorId) -> Result<Vec<i32>> {
        let t = self.get(id)?;
        if t.dtype != DType::I32 {
            return Err(Error::InvalidArgument(format!(
                "tensor '{}' is {}, not i32",
                t.name, t.dtype
            )));
        }
        Ok(bytemuck::pod_collect_to_vec(&self.get_bytes(id)?))
    }
}

impl Context {
    /// The bytes of any tensor (views with strides included), gathered into contiguous order.
    pub fn read_bytes(&self, id: TensorId) -> Result<Vec<u8>> {
        let t = self.get(id)?;
        if t.is_contiguous() {
            return self.get_bytes(id);
        }
        // Read the whole span once (one transfer for device buffers), then gather on the host.
        let (buf, off) = self.located(id)?;
        let mut span = vec![0u8; t.nbytes()];
        buf.get(off, &mut span)?;
        Ok(gather_strided(t, &span))
    }

    /// [`Context::read_bytes`] without blocking.
    pub async fn read_bytes_async(&self, id: TensorId) -> Result<Vec<u8>> {
        let t = self.get(id)?;
        if t.is_contiguous() {
            return self.get_bytes_async(id).await;
        }
        let (buf, off) = self.located(id)?;
        let span = buf.get_async(off, t.nbytes()).await?;
        Ok(gather_strided(t, &span))
    }
}

/// Values of `dtype` (f32, i32 as numbers, or any dequantizable type) decoded to f32: the one
/// decoder behind the sync and async reads.
pub fn decode_f32(dtype: DType, bytes: &[u8]) -> Result<Vec<f32>> {
    match dtype {
        DType::F32 => Ok(bytemuck::pod_collect_to_vec(bytes)),
        DType::I32 => Ok(bytemuck::pod_collect_to_vec::<u8, i32>(bytes)
            .into_iter()
            .map(|x| x as f32)
            .collect()),
        dt => {
            let n = bytes.len() / dt.type_size() * dt.block_size();
            let mut out = vec![0f32; n];
            crate::backend::cpu::dequantize_row(dt, bytes, &mut out)?;
            Ok(out)
        }
    }
}

/// The rows of a strided tensor gathered into contiguous order from `span`, its bytes starting at
/// its first element (`nbytes()` long).
pub(crate) fn gather_strided(t: &crate::tensor::Tensor, span: &[u8]) -> Vec<u8> {
    let ts = t.dtype.type_size();
    let bs = t.dtype.block_size();
    let row_bytes = t.ne[0] / bs * ts;
    let mut out = Vec::with_capacity(row_bytes * t.nrows());
    for i3 in 0..t.ne[3] {
        for i2 in 0..t.ne[2] {
            for i1 in 0..t.ne[1] {
                let base = i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3];
                if t.nb[0] == ts {
                    out.extend_from_slice(&span[base..base + row_bytes]);
                } else {
                    for i0 in 0..t.ne[0] / bs {
                        let p = base + i0 * t.nb[0];
                        out.extend_from_slice(&span[p..p + ts]);
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Drive a future that needs no waking (the default async transfers are ready at once).
    fn ready<T>(f: impl std::future::Future<Output = T>) -> T {
        let mut f = std::pin::pin!(f);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match f.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(v) => v,
            std::task::Poll::Pending => panic!("a default async transfer was pending"),
        }
    }

    /// The async reads and writes (the sync path by default) agree with the sync ones: a
    /// quantized tensor decoded to f32, a strided view located through its source.
    #[test]
    fn async_transfers_match_sync() -> Result<()> {
        let mut ctx = Context::new();
        let q = ctx.new_tensor_2d(DType::Q8_0, 32, 2)?;
        let a = ctx.new_tensor_2d(DType::F32, 3, 2)?;
        let at = ctx.transpose(a)?;
        let _buf =
            crate::alloc::alloc_ctx_tensors(&mut ctx, &crate::backend::cpu::cpu_buffer_type())?;
        let vals: Vec<f32> = (0..64).map(|i| i as f32 * 0.25 - 8.0).collect();
        ctx.set_f32(q, &vals)?;
        let bytes: Vec<u8> = [1f32, 2., 3., 4., 5., 6.]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        ready(ctx.set_bytes_async(a, &bytes))?;
        assert_eq!(ctx.get_f32(a)?, [1., 2., 3., 4., 5., 6.]);
        assert_eq!(ready(ctx.get_f32_async(q))?, ctx.get_f32(q)?);
        assert_eq!(ready(ctx.read_bytes_async(at))?, ctx.read_bytes(at)?);
        assert_eq!(
            ctx.data_location(at).map(|(_, o)| o),
            ctx.data_location(a).map(|(_, o)| o)
        );
        assert!(
            ready(ctx.get_bytes_async(at)).is_err(),
            "a strided view is not contiguous"
        );
        Ok(())
    }
}
