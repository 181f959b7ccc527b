//! Development check: teacher-forced greedy continuation of SmolLM2 against llama.cpp's ids.
use ggweb::models::llama::LlamaModel;
fn main() {
    let path = std::env::args().nth(1).expect("model path");
    let mut m = LlamaModel::open(std::path::Path::new(&path), 256, 2).unwrap();
    let toks = [6403u32, 1980, 253, 655, 28, 665, 436, 253, 1838, 8085, 617];
    let want = [
        761u32, 253, 1767, 2470, 288, 919, 701, 506, 4416, 2332, 578, 30, 909, 436,
    ];
    let mut l = m.eval(&toks, false).unwrap();
    for &w in &want {
        let mut idx: Vec<usize> = (0..l.len()).collect();
        idx.sort_by(|&a, &b| l[b].total_cmp(&l[a]));
        println!(
            "want {w} ({:.3}) top: {} {:.3} | {} {:.3}",
            l[w as usize], idx[0], l[idx[0]], idx[1], l[idx[1]]
        );
        l = m.eval(&[w], false).unwrap();
    }
}
