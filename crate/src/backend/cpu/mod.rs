#[cfg(target_arch = "aarch64")]
pub mod aarch64;
pub mod vec;
#[cfg(target_arch = "x86_64")]
pub mod x86;
