//! The `ggweb` command-line tool: inspect GGUF files, run MNIST, benchmark kernels.

#[cfg(not(target_arch = "wasm32"))]
mod cli;

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    if let Err(e) = cli::run() {
        // A reader that stopped early (`ggweb info … | head`, `grep -q`) is not an error of ours:
        // exit quietly and successfully, as other Unix tools do.
        if matches!(&e, ggweb::Error::Io(io) if io.kind() == std::io::ErrorKind::BrokenPipe) {
            std::process::exit(0);
        }
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

#[cfg(target_arch = "wasm32")]
fn main() {}
