//! Small helpers to build plain JS objects.

use js_sys::{Array, BigInt, Object, Reflect};
use wasm_bindgen::JsValue;

pub(crate) fn set(obj: &Object, key: &str, value: impl Into<JsValue>) {
    // Reflect::set on a fresh plain object cannot fail.
    let _ = Reflect::set(obj, &JsValue::from_str(key), &value.into());
}

pub(crate) fn u64_js(x: u64) -> JsValue {
    BigInt::from(x).into()
}

pub(crate) fn i64_js(x: i64) -> JsValue {
    BigInt::from(x).into()
}

pub(crate) fn array_of<T>(items: impl IntoIterator<Item = T>, f: impl Fn(T) -> JsValue) -> Array {
    let a = Array::new();
    for x in items {
        a.push(&f(x));
    }
    a
}
