//! Block formats (stub on main until the quant branch lands).
use crate::{DType, Error, Result};
pub fn quantize_row(dtype: DType, _src: &[f32], _dst: &mut [u8]) -> Result<()> {
    Err(Error::UnsupportedType {
        dtype,
        what: "quantize".into(),
    })
}
pub fn dequantize_row(dtype: DType, _src: &[u8], _dst: &mut [f32]) -> Result<()> {
    Err(Error::UnsupportedType {
        dtype,
        what: "dequantize".into(),
    })
}
