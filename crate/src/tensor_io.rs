//! Reading and writing tensor data through their backend buffers.

use crate::{Context, DType, Error, Result, TensorId};

impl Context {
    fn data_location(&self, id: TensorId) -> Result<(&crate::tensor::TensorData, usize)> {
        let t = self.get(id)?;
        match (&t.data, t.view_src) {
            (Some(d), _) => Ok((d, d.offset)),
            (None, Some(v)) => match &self.tensor(v).data {
                Some(d) => Ok((d, d.offset + t.view_offs)),
                None => Err(Error::InvalidArgument(format!(
                    "tensor '{}' has no data yet",
                    t.name
                ))),
            },
            (None, None) => Err(Error::InvalidArgument(format!(
                "tensor '{}' has no data yet (allocate it first)",
                t.name
            ))),
        }
    }

    /// Write the raw bytes of a contiguous tensor.
    pub fn set_bytes(&self, id: TensorId, bytes: &[u8]) -> Result<()> {
        let t = self.get(id)?;
        if !t.is_contiguous() {
            return Err(Error::InvalidArgument(format!(
                "set of non-contiguous tensor '{}'",
                t.name
            )));
        }
        if bytes.len() != t.nbytes() {
            return Err(Error::Shape(format!(
                "tensor '{}' holds {} bytes, got {}",
                t.name,
                t.nbytes(),
                bytes.len()
            )));
        }
        let (d, off) = self.data_location(id)?;
        d.buffer.set(off, bytes)
    }

    /// Read the raw bytes of a contiguous tensor.
    pub fn get_bytes(&self, id: TensorId) -> Result<Vec<u8>> {
        let t = self.get(id)?;
        if !t.is_contiguous() {
            return Err(Error::InvalidArgument(format!(
                "get of non-contiguous tensor '{}'",
                t.name
            )));
        }
        let (d, off) = self.data_location(id)?;
        let mut out = vec![0u8; t.nbytes()];
        d.buffer.get(off, &mut out)?;
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
                crate::quant::quantize_row(dt, values, &mut out)?;
                out
            }
        };
        self.set_bytes(id, &bytes)
    }

    /// Read the values as f32, converting from the tensor's type.
    pub fn get_f32(&self, id: TensorId) -> Result<Vec<f32>> {
        let t = self.get(id)?;
        let bytes = self.get_bytes(id)?;
        match t.dtype {
            DType::F32 => Ok(bytemuck::pod_collect_to_vec(&bytes)),
            DType::I32 => Ok(bytemuck::pod_collect_to_vec::<u8, i32>(&bytes)
                .into_iter()
                .map(|x| x as f32)
                .collect()),
            dt => {
                let mut out = vec![0f32; t.nelements()];
                crate::quant::dequantize_row(dt, &bytes, &mut out)?;
                Ok(out)
            }
        }
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
        let (d, off) = self.data_location(id)?;
        let mut span = vec![0u8; t.nbytes()];
        d.buffer.get(off, &mut span)?;
        Ok(gather_strided(t, &span))
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
