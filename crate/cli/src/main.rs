//! The `ggweb` command-line tool: inspect GGUF files, run MNIST and LLMs, benchmark kernels.

mod commands;

fn main() {
    if let Err(e) = commands::run() {
        // A reader that stopped early (`ggweb info … | head`, `grep -q`) is not an error of ours:
        // exit quietly and successfully, as other Unix tools do.
        if matches!(&e, ggweb::Error::Io(io) if io.kind() == std::io::ErrorKind::BrokenPipe) {
            std::process::exit(0);
        }
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
