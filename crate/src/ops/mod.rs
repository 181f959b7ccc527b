//! Op constructors with shape and type checks (ggml.c's ggml_add, ggml_mul_mat, …).

use crate::tensor::Op;
use crate::{Context, Error, Result, TensorId};

mod nn;

impl Context {
    /// True when `b` can be broadcast (repeated) to `a`'s shape (ggml_can_repeat).
    pub fn can_repeat(&self, b: TensorId, a: TensorId) -> bool {
        let (tb, ta) = (self.tensor(b), self.tensor(a));
        (0..4).all(|i| tb.ne[i] != 0 && ta.ne[i] % tb.ne[i] == 0)
    }

    fn binary(&mut self, op: Op, a: TensorId, b: TensorId) -> Result<TensorId> {
        if !self.can_repeat(b, a) {
            return Err(Error::Shape(format!(
                "{}: {:?} cannot be broadcast to {:?}",
                op.name(),
                self.tensor(b).ne,
                self.tensor(a).ne
            )));
        }
        let t = self.tensor(a);
        let (dtype, ne) = (t.dtype, t.ne);
        self.new_op(op, dtype, ne, &[a, b])
    }

    /// a + b, b broadcast to a's shape.
    pub fn add(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(Op::Add, a, b)
    }
}
