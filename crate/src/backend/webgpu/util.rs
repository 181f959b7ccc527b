//! Small async helpers: a minimal `block_on` (native only: nothing may block in the browser,
//! which awaits the futures instead), a one-shot future for `map_async`
//! callbacks, and waiting for the queue to drain.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll, Waker};

use super::Shared;
use crate::Result;

/// Run a future to completion on this thread (native; wgpu's native futures are ready at once or
/// driven by `device.poll`).
#[cfg(not(target_arch = "wasm32"))]
pub fn block_on<F: Future>(fut: F) -> F::Output {
    struct ThreadWaker(std::thread::Thread);
    impl std::task::Wake for ThreadWaker {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = TaskContext::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        match fut.as_mut().poll(&mut cx) {
            Poll::Ready(v) => return v,
            Poll::Pending => std::thread::park(),
        }
    }
}

struct OneshotState<T> {
    value: Option<T>,
    waker: Option<Waker>,
}

/// The sending half of a one-shot channel (callback → future).
pub(crate) struct OneshotSender<T>(Arc<Mutex<OneshotState<T>>>);
/// The receiving half: a future resolving to the sent value.
pub(crate) struct OneshotReceiver<T>(Arc<Mutex<OneshotState<T>>>);

pub(crate) fn oneshot<T>() -> (OneshotSender<T>, OneshotReceiver<T>) {
    let s = Arc::new(Mutex::new(OneshotState {
        value: None,
        waker: None,
    }));
    (OneshotSender(s.clone()), OneshotReceiver(s))
}

impl<T> OneshotSender<T> {
    pub(crate) fn send(self, v: T) {
        let waker = match self.0.lock() {
            Ok(mut g) => {
                g.value = Some(v);
                g.waker.take()
            }
            Err(_) => None,
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl<T> OneshotReceiver<T> {
    /// The value if it was sent already (native polling path).
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn try_take(&self) -> Option<T> {
        self.0.lock().ok().and_then(|mut g| g.value.take())
    }
}

impl<T> Future for OneshotReceiver<T> {
    type Output = T;
    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<T> {
        let mut g = match self.0.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        match g.value.take() {
            Some(v) => Poll::Ready(v),
            None => {
                g.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// Wait until all submitted work finished (native); a no-op in the browser, where reads are
/// ordered after the work anyway.
pub(crate) fn wait_idle(shared: &Shared) -> Result<()> {
    #[cfg(not(target_arch = "wasm32"))]
    {
        shared
            .device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| crate::Error::Backend(format!("WebGPU poll: {e}")))?;
    }
    shared.take_error()
}

/// Wait until all submitted work finished without blocking (the browser's way; natively the
/// callback fires during `device.poll`).
pub(crate) async fn wait_idle_async(shared: &Shared) -> Result<()> {
    let (tx, rx) = oneshot();
    shared.queue.on_submitted_work_done(move || tx.send(()));
    #[cfg(not(target_arch = "wasm32"))]
    {
        shared
            .device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| crate::Error::Backend(format!("WebGPU poll: {e}")))?;
    }
    rx.await;
    shared.take_error()
}

/// The browser's own `GPUAdapterInfo` (vendor, architecture, description): wgpu keeps only the
/// description, which Chromium leaves empty (SwiftShader is vendor "google", architecture
/// "swiftshader"). `None` where there is no `navigator.gpu` or no adapter.
#[cfg(target_arch = "wasm32")]
pub(crate) async fn browser_adapter_info() -> Option<(String, String, String)> {
    use js_sys::{Function, Promise, Reflect};
    use wasm_bindgen::{JsCast, JsValue};
    let get = |o: &JsValue, k: &str| Reflect::get(o, &JsValue::from_str(k)).ok();
    let nav = get(&js_sys::global(), "navigator")?;
    let gpu = get(&nav, "gpu").filter(|g| g.is_object())?;
    let request: Function = get(&gpu, "requestAdapter")?.dyn_into().ok()?;
    let promise: Promise = request.call0(&gpu).ok()?.dyn_into().ok()?;
    let adapter = wasm_bindgen_futures::JsFuture::from(promise).await.ok()?;
    let info = get(&adapter, "info").filter(|i| i.is_object())?;
    let s = |k: &str| {
        get(&info, k)
            .and_then(|v| v.as_string())
            .unwrap_or_default()
    };
    Some((s("vendor"), s("architecture"), s("description")))
}
