//! Placing a GGUF file's tensors in a [`Context`], backed by the file's bytes in place (mmap or
//! an owned buffer): ggml's "weights context" without copying the weights.

use std::collections::HashMap;
use std::sync::Arc;

use crate::backend::cpu::{CpuBuffer, HostBytes};
use crate::backend::{Buffer, BufferUsage};
use crate::gguf::Gguf;
use crate::tensor::TensorData;
use crate::{Context, Error, Result, TensorId};

/// The tensors of a GGUF file, described in a context and backed by the file's bytes.
pub struct Weights {
    pub by_name: HashMap<String, TensorId>,
    /// The first buffer holding weights (the only one on the CPU).
    pub buffer: Arc<dyn Buffer>,
    /// Every buffer holding weights (device memory is split by the device's largest buffer).
    pub buffers: Vec<Arc<dyn Buffer>>,
    /// Tensors kept in host memory although a device buffer type was asked for, with why.
    pub on_host: Vec<String>,
}

impl Weights {
    /// Describe every tensor of `gguf` in `ctx` with data inside `bytes` (the whole file).
    /// The bytes are used in place when the data section is 32-byte aligned in memory, else copied
    /// once into an aligned buffer (kernels read f32/f16 with aligned loads).
    pub fn load(ctx: &mut Context, gguf: &Gguf, bytes: Arc<dyn HostBytes>) -> Result<Weights> {
        Self::load_into(ctx, gguf, bytes, None)
    }

    /// As [`Weights::load`], but into a buffer of `buft` when that is device memory (every tensor
    /// that fits one device buffer is uploaded once); host buffer types use the bytes in place.
    /// [`Weights::load_placed`] instead puts each weight where the ops using it run.
    pub fn load_into(
        ctx: &mut Context,
        gguf: &Gguf,
        bytes: Arc<dyn HostBytes>,
        buft: Option<&Arc<dyn crate::backend::BufferType>>,
    ) -> Result<Weights> {
        if bytes.rewritten() {
            return Err(Error::InvalidArgument(
                "these bytes were rewritten in place by a model that repacked its weights: \
                 load from the file again"
                    .into(),
            ));
        }
        let file = bytes.bytes();
        let start = usize::try_from(gguf.data_offset)
            .map_err(|_| Error::Gguf("data offset does not fit in memory".into()))?;
        if start > file.len() {
            return Err(Error::Gguf(format!(
                "data section starts at {start}, past the end of the file ({} bytes)",
                file.len()
            )));
        }
        let len = file.len() - start;
        let aligned = (file.as_ptr() as usize + start).is_multiple_of(32);
        let buffer: Arc<dyn Buffer> = if aligned {
            Arc::new(CpuBuffer::from_host_bytes(bytes.clone(), start, len)?)
        } else {
            let b = crate::backend::cpu::cpu_buffer_type().alloc_weights_buffer(len)?;
            b.set(0, &file[start..])?;
            b.set_usage(BufferUsage::Weights);
            b
        };
        let mut by_name = HashMap::with_capacity(gguf.tensors.len());
        for info in &gguf.tensors {
            let ne: Vec<usize> = info
                .ne
                .iter()
                .map(|&n| {
                    usize::try_from(n)
                        .map_err(|_| Error::Gguf(format!("tensor '{}' is too large", info.name)))
                })
                .collect::<Result<_>>()?;
            let id = ctx.new_tensor(info.dtype, &ne)?;
            ctx.set_name(id, &info.name)?;
            let offset = usize::try_from(info.offset)
                .map_err(|_| Error::Gguf(format!("tensor '{}' offset too large", info.name)))?;
            let nbytes = ctx.tensor(id).nbytes();
            if offset.checked_add(nbytes).is_none_or(|end| end > len) {
                return Err(Error::Gguf(format!(
                    "tensor '{}' ({nbytes} bytes at {offset}) lies outside the data section ({len} bytes)",
                    info.name
                )));
            }
            ctx.set_data(
                id,
                TensorData {
                    buffer: buffer.clone(),
                    offset,
                },
            );
            by_name.insert(info.name.clone(), id);
        }
        if let Some(buft) = buft.filter(|b| !b.is_host()) {
            return Self::upload(ctx, gguf, file, start, by_name, buffer, buft, |_| None);
        }
        Ok(Weights {
            by_name,
            buffers: vec![buffer.clone()],
            buffer,
            on_host: Vec::new(),
        })
    }

    /// [`Weights::load_into`] over the files of a split GGUF (`*-00001-of-0000N.gguf`): each
    /// part's tensors are backed by that part's bytes (or uploaded from them); a tensor name in
    /// two parts is an error.
    pub fn load_parts(
        ctx: &mut Context,
        parts: &[(&Gguf, Arc<dyn HostBytes>)],
        buft: Option<&Arc<dyn crate::backend::BufferType>>,
    ) -> Result<Weights> {
        let mut all: Option<Weights> = None;
        for (gguf, bytes) in parts {
            let w = Self::load_into(ctx, gguf, bytes.clone(), buft)?;
            match all.as_mut() {
                None => all = Some(w),
                Some(a) => {
                    for (name, id) in w.by_name {
                        if a.by_name.insert(name.clone(), id).is_some() {
                            return Err(Error::Gguf(format!(
                                "tensor '{name}' is in two parts of the split model"
                            )));
                        }
                    }
                    a.buffers.extend(w.buffers);
                    a.on_host.extend(w.on_host);
                }
            }
        }
        all.ok_or_else(|| Error::InvalidArgument("no model files".into()))
    }

    /// Place each weight where the ops that use it will run (ggml's choice of a weight's buffer
    /// type by `supports_op` of its op): `users` builds, in `ctx`, the graph the model runs
    /// (e.g. its largest batch) from the weights and returns its outputs; a weight goes to a
    /// buffer of `device`'s buffer type (uploaded once, straight from the file bytes) when the
    /// device supports every node that reads it, directly or through views, and otherwise stays
    /// in host memory, used in place (no copy), where the scheduler then runs those ops on the
    /// CPU. Each weight kept on the host is listed in `on_host` with the device's reason. The
    /// probe graph is removed from `ctx` afterwards. Without a device (or with a host buffer
    /// type) this is [`Weights::load`].
    pub fn load_placed(
        ctx: &mut Context,
        gguf: &Gguf,
        bytes: Arc<dyn HostBytes>,
        device: Option<&Arc<dyn crate::backend::Device>>,
        users: impl FnOnce(&mut Context, &Weights) -> Result<Vec<TensorId>>,
    ) -> Result<Weights> {
        let w = Self::load_into(ctx, gguf, bytes.clone(), None)?;
        let Some(device) = device else {
            return Ok(w);
        };
        let buft = device.buffer_type();
        if buft.is_host() {
            return Ok(w);
        }
        // Why each weight must stay on the host (absent: every reader runs on the device).
        let mut why: HashMap<TensorId, String> = HashMap::new();
        let mut used: std::collections::HashSet<TensorId> = std::collections::HashSet::new();
        let weights: std::collections::HashSet<TensorId> = w.by_name.values().copied().collect();
        let mark = ctx.mark();
        let probe = users(ctx, &w).map(|outs| {
            let graph = crate::Graph::build(ctx, &outs);
            for &n in &graph.nodes {
                let t = ctx.tensor(n);
                if t.op.is_view() {
                    continue;
                }
                for (slot, s) in t.src.iter().enumerate() {
                    let Some(s) = *s else { continue };
                    // im2col takes only the shape of its kernel (src0), never its data.
                    if slot == 0 && matches!(t.op, crate::Op::Im2Col { .. }) {
                        continue;
                    }
                    // Through views to the tensor that owns the data.
                    let mut root = s;
                    while let Some(v) = ctx.tensor(root).view_src {
                        root = v;
                    }
                    if !weights.contains(&root) {
                        continue;
                    }
                    used.insert(root);
                    if !why.contains_key(&root) && !device.supports_op(ctx, n) {
                        let reason = device
                            .unsupported_reason(ctx, n)
                            .unwrap_or_else(|| format!("{} is not supported", t.op.name()));
                        why.insert(root, format!("read by {}: {reason}", t.op.name()));
                    }
                }
            }
        });
        ctx.reset_to(mark);
        probe?;
        let file = bytes.bytes();
        let start = usize::try_from(gguf.data_offset)
            .map_err(|_| Error::Gguf("data offset does not fit in memory".into()))?;
        Self::upload(ctx, gguf, file, start, w.by_name, w.buffer, &buft, |id| {
            if !used.contains(&id) {
                Some("not read by the model's graph".into())
            } else {
                why.remove(&id)
            }
        })
    }

    /// Move the tensors (described in `ctx`, data in the host buffer `host`) into buffers of
    /// the device buffer type `buft`, as few as its largest buffer allows, copying each tensor
    /// straight from the file bytes. A tensor larger than one device buffer, or one for which
    /// `keep` gives a reason, stays in `host` (the scheduler then runs its ops on the CPU) and
    /// is listed in `on_host`.
    #[allow(clippy::too_many_arguments)]
    fn upload(
        ctx: &mut Context,
        gguf: &Gguf,
        file: &[u8],
        start: usize,
        by_name: HashMap<String, TensorId>,
        host: Arc<dyn Buffer>,
        buft: &Arc<dyn crate::backend::BufferType>,
        mut keep: impl FnMut(TensorId) -> Option<String>,
    ) -> Result<Weights> {
        let mut on_host = Vec::new();
        let mut packer = Packer::new(buft.as_ref());
        for info in &gguf.tensors {
            let Some(&id) = by_name.get(&info.name) else {
                continue;
            };
            if let Some(reason) = keep(id) {
                on_host.push(format!("{} ({reason})", info.name));
                continue;
            }
            if let Err(note) = packer.add(id, buft.alloc_size(ctx, id)) {
                on_host.push(format!("{} ({note})", info.name));
            }
        }
        let mut buffers = Vec::with_capacity(packer.groups.len() + 1);
        for ids in packer.groups {
            // Where each tensor is in the file, before its data moves to the device.
            let offsets: Vec<usize> = ids
                .iter()
                .map(|&id| ctx.tensor(id).data.as_ref().map_or(0, |d| d.offset))
                .collect();
            for &id in &ids {
                ctx.tensor_mut(id).data = None;
            }
            let Some(device) = crate::alloc::alloc_weights(ctx, &ids, buft)? else {
                continue;
            };
            device.set_usage(BufferUsage::Weights);
            for (&id, offset) in ids.iter().zip(offsets) {
                let n = ctx.tensor(id).nbytes();
                let src = &file[start + offset..start + offset + n];
                ctx.set_bytes(id, src)?;
            }
            buffers.push(device);
        }
        if !on_host.is_empty() || buffers.is_empty() {
            // Some (or all) tensors are read in place.
            buffers.push(host);
        }
        let buffer = buffers
            .first()
            .cloned()
            .ok_or_else(|| Error::Model("no tensors to load".into()))?;
        Ok(Weights {
            by_name,
            buffer,
            buffers,
            on_host,
        })
    }

    /// The tensor called `name`, or a model error naming it.
    pub fn get(&self, name: &str) -> Result<TensorId> {
        self.by_name
            .get(name)
            .copied()
            .ok_or_else(|| Error::Model(format!("missing tensor '{name}'")))
    }
}

/// Packs tensors, in order, into groups that each fit one buffer of a buffer type (device
/// memory is split by the device's largest buffer).
struct Packer {
    align: usize,
    max: usize,
    used: usize,
    groups: Vec<Vec<TensorId>>,
}

impl Packer {
    fn new(buft: &dyn crate::backend::BufferType) -> Packer {
        Packer {
            align: buft.alignment().max(1),
            max: buft.max_size(),
            used: 0,
            groups: Vec::new(),
        }
    }

    /// Add a tensor of `size` bytes; a note when it is larger than one buffer (not added).
    fn add(&mut self, id: TensorId, size: usize) -> std::result::Result<(), String> {
        if size > self.max {
            return Err(format!(
                "{size} bytes > the device's largest buffer, {} bytes",
                self.max
            ));
        }
        let at = crate::alloc::align_up(self.used, self.align);
        match self.groups.last_mut() {
            Some(g) if at + size <= self.max => {
                g.push(id);
                self.used = at + size;
            }
            _ => {
                self.groups.push(vec![id]);
                self.used = size;
            }
        }
        Ok(())
    }
}

/// Weights filled from a GGUF's bytes as they arrive in file order (a download, Blob slices),
/// straight into the buffers they end up in: the header decides each tensor's place first (the
/// device buffer type's buffers, grouped as [`Weights::load_into`] groups them; a tensor larger
/// than one device buffer in host memory), then each arriving byte range is written there and
/// dropped. Only a word (< 4 bytes) of a tensor is ever staged, so on a GPU the file's bytes
/// never accumulate in host memory. The parts of a split GGUF follow one another.
pub struct WeightsStream {
    ctx: Context,
    buft: Arc<dyn crate::backend::BufferType>,
    by_name: HashMap<String, TensorId>,
    buffers: Vec<Arc<dyn Buffer>>,
    on_host: Vec<String>,
    /// The current part's tensors in data order: (offset in the data section, bytes, tensor).
    plan: Vec<(u64, usize, TensorId)>,
    /// The tensor being filled (index into `plan`).
    next: usize,
    /// Bytes of `plan[next]` written to its buffer (a multiple of 4 until it is complete).
    written: usize,
    /// The bytes of `plan[next]` after `written` that are not yet a whole word.
    stage: Vec<u8>,
    /// File offset of the current part's data section.
    data_offset: u64,
    parts: usize,
}

impl WeightsStream {
    /// Weights to be placed in buffers of `buft` (device memory, or host memory for a CPU run).
    pub fn new(buft: Arc<dyn crate::backend::BufferType>) -> WeightsStream {
        WeightsStream {
            ctx: Context::new(),
            buft,
            by_name: HashMap::new(),
            buffers: Vec::new(),
            on_host: Vec::new(),
            plan: Vec::new(),
            next: 0,
            written: 0,
            stage: Vec::new(),
            data_offset: 0,
            parts: 0,
        }
    }

    /// Begin the next part (the whole file when not split): describe its tensors and allocate
    /// their buffers. The previous part must be complete ([`WeightsStream::end_part`]).
    pub fn begin_part(&mut self, gguf: &Gguf) -> Result<()> {
        if self.next < self.plan.len() {
            return Err(Error::InvalidArgument(
                "the previous part's tensors are not complete".into(),
            ));
        }
        let ctx = &mut self.ctx;
        let mut plan = Vec::with_capacity(gguf.tensors.len());
        for info in &gguf.tensors {
            let ne: Vec<usize> = info
                .ne
                .iter()
                .map(|&n| {
                    usize::try_from(n)
                        .map_err(|_| Error::Gguf(format!("tensor '{}' is too large", info.name)))
                })
                .collect::<Result<_>>()?;
            let id = ctx.new_tensor(info.dtype, &ne)?;
            ctx.set_name(id, &info.name)?;
            if self.by_name.insert(info.name.clone(), id).is_some() {
                return Err(Error::Gguf(format!(
                    "tensor '{}' is in two parts of the split model",
                    info.name
                )));
            }
            plan.push((info.offset, ctx.tensor(id).nbytes(), id));
        }
        // The reader checked that tensors do not overlap; data arrives in offset order.
        plan.sort_by_key(|p| p.0);
        let device = !self.buft.is_host();
        let mut packer = Packer::new(self.buft.as_ref());
        let mut host = Vec::new();
        for &(_, _, id) in &plan {
            match packer.add(id, self.buft.alloc_size(ctx, id)) {
                Ok(()) => {}
                // The scheduler runs the ops reading it on the CPU.
                Err(note) if device => {
                    self.on_host
                        .push(format!("{} ({note})", ctx.tensor(id).name));
                    host.push(id);
                }
                Err(note) => {
                    return Err(Error::OutOfMemory(format!(
                        "{}: {note}",
                        ctx.tensor(id).name
                    )))
                }
            }
        }
        let groups = packer.groups;
        let cpu = crate::backend::cpu::cpu_buffer_type();
        for (ids, buft) in groups
            .iter()
            .map(|g| (g, &self.buft))
            .chain(std::iter::once((&host, &cpu)))
        {
            if let Some(b) = crate::alloc::alloc_weights(ctx, ids, buft)? {
                b.set_usage(BufferUsage::Weights);
                self.buffers.push(b);
            }
        }
        self.plan = plan;
        self.next = 0;
        self.written = 0;
        self.stage.clear();
        self.data_offset = gguf.data_offset;
        self.parts += 1;
        self.skip_empty();
        Ok(())
    }

    fn skip_empty(&mut self) {
        while self.plan.get(self.next).is_some_and(|p| p.1 == 0) {
            self.next += 1;
        }
    }

    /// Write `data` of `plan[next]` at byte `at` of the tensor.
    fn write(&self, at: usize, data: &[u8]) -> Result<()> {
        let id = self.plan[self.next].2;
        let d = self
            .ctx
            .tensor(id)
            .data
            .as_ref()
            .ok_or_else(|| Error::Model("streamed weight without a buffer".into()))?;
        d.buffer.set(d.offset + at, data)
    }

    /// The bytes of the current part at file offset `offset` (chunks in order; the header's and
    /// the padding's bytes are skipped).
    pub fn push(&mut self, offset: u64, mut data: &[u8]) -> Result<()> {
        let mut at = offset;
        while !data.is_empty() {
            let Some(&(t_off, n, _)) = self.plan.get(self.next) else {
                return Ok(());
            };
            let done = self.written + self.stage.len();
            let want = self.data_offset + t_off + done as u64;
            if at + data.len() as u64 <= want {
                return Ok(());
            }
            if at > want {
                return Err(Error::Gguf(format!(
                    "bytes {want}..{at} of the file are missing (chunks out of order)"
                )));
            }
            data = &data[(want - at) as usize..];
            at = want;
            let take = (n - done).min(data.len());
            let complete = done + take == n;
            let mut piece = &data[..take];
            if !self.stage.is_empty() {
                // Complete the staged word first.
                let fill = (4 - self.stage.len()).min(piece.len());
                self.stage.extend_from_slice(&piece[..fill]);
                piece = &piece[fill..];
                if self.stage.len() == 4 || complete && piece.is_empty() {
                    let w = std::mem::take(&mut self.stage);
                    self.write(self.written, &w)?;
                    self.written += w.len();
                }
            }
            if self.stage.is_empty() && !piece.is_empty() {
                // Straight from the chunk: whole words, or everything when the tensor ends.
                let direct = if complete {
                    piece.len()
                } else {
                    piece.len() & !3
                };
                self.write(self.written, &piece[..direct])?;
                self.written += direct;
                self.stage.extend_from_slice(&piece[direct..]);
            }
            if complete {
                self.next += 1;
                self.written = 0;
                self.skip_empty();
            }
            at += take as u64;
            data = &data[take..];
        }
        Ok(())
    }

    /// Bytes of the current part the tensors still wait for.
    pub fn pending(&self) -> u64 {
        let done = self.written + self.stage.len();
        self.plan[self.next.min(self.plan.len())..]
            .iter()
            .map(|p| p.1 as u64)
            .sum::<u64>()
            .saturating_sub(done as u64)
    }

    /// At the end of a part: every tensor must be complete.
    pub fn end_part(&self) -> Result<()> {
        match self.plan.get(self.next) {
            None => Ok(()),
            Some(&(_, n, id)) => Err(Error::Gguf(format!(
                "file truncated: tensor '{}' has {} of its {n} bytes ({} bytes missing in all)",
                self.ctx.tensor(id).name,
                self.written + self.stage.len(),
                self.pending()
            ))),
        }
    }

    /// The context describing every weight and the weights, once every part is complete.
    pub fn finish(self) -> Result<(Context, Weights)> {
        self.end_part()?;
        if self.parts == 0 {
            return Err(Error::InvalidArgument("no model files".into()));
        }
        let buffer = self
            .buffers
            .first()
            .cloned()
            .ok_or_else(|| Error::Model("no tensors to load".into()))?;
        Ok((
            self.ctx,
            Weights {
                by_name: self.by_name,
                buffer,
                buffers: self.buffers,
                on_host: self.on_host,
            },
        ))
    }
}

impl HostBytes for crate::gguf::GgufFile {
    fn bytes(&self) -> &[u8] {
        crate::gguf::GgufFile::bytes(self)
    }
    // A private (copy-on-write) mapping may be rewritten in place (`GgufFile::open_private`).
    fn heap_ptr(&self) -> Option<*mut u8> {
        self.writable_ptr()
    }
    fn mark_rewritten(&self) {
        crate::gguf::GgufFile::mark_rewritten(self)
    }
    fn rewritten(&self) -> bool {
        crate::gguf::GgufFile::rewritten(self)
    }
}
