//! BERT sentence embeddings (all-MiniLM-L6-v2, converted by scripts/convert-bert.py and fetched by
//! scripts/fetch-models.sh) against llama.cpp's `llama-embedding` on the same GGUF
//! (native-tests/data/minilm-embeddings.json) and sentence-transformers' similarity figure.

#[path = "support/models.rs"]
mod models;
#[path = "support/split.rs"]
mod split;

use std::path::PathBuf;

use ggweb::models::bert::{cosine, Embedder, Pooling};

fn minilm() -> PathBuf {
    models::model("GGWEB_MINILM", "all-MiniLM-L6-v2.f16.gguf")
}

#[test]
fn minilm_matches_llama_embedding() {
    let mut e = Embedder::open(&minilm()).expect("open");
    assert_eq!(e.hp.pooling, Pooling::Mean);
    assert_eq!(e.n_embd(), 384);
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/minilm-embeddings.json");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("read")).expect("json");
    let texts: Vec<&str> = v["texts"]
        .as_array()
        .expect("texts")
        .iter()
        .map(|t| t.as_str().expect("text"))
        .collect();
    let got = e.embed(&texts).expect("embed");
    assert_eq!(got.len(), texts.len());
    for (i, (g, want)) in got
        .iter()
        .zip(v["embeddings"].as_array().expect("embeddings"))
        .enumerate()
    {
        let want: Vec<f32> = want
            .as_array()
            .expect("vector")
            .iter()
            .map(|x| x.as_f64().expect("f") as f32)
            .collect();
        assert_eq!(g.len(), want.len());
        let norm: f32 = g.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
        let c = cosine(g, &want);
        println!("{:?}: cosine to llama-embedding {c:.6}", texts[i]);
        assert!(c >= 0.999, "{:?}: cosine {c}", texts[i]);
    }
    // sentence-transformers: ≈ 0.755 for this pair.
    let sim = cosine(&got[0], &got[1]);
    println!("food/bread similarity {sim:.4}");
    assert!((sim - 0.755).abs() < 0.005, "similarity {sim}");
}

#[test]
fn bad_inputs_are_errors() {
    let mut e = Embedder::open(&minilm()).expect("open");
    let long = "word ".repeat(600);
    assert!(e.embed(&[long.as_str()]).is_err());
    assert!(e.hidden_states(&[]).is_err());
    assert!(e.hidden_states(&[1_000_000]).is_err());
    // Still usable after the errors.
    assert_eq!(e.embed(&["ok"]).expect("embed")[0].len(), 384);
    let toks = e.token_embeddings("two words").expect("tokens");
    assert_eq!(toks.len(), e.tokenize("two words").len());
}

fn vectors(v: &serde_json::Value) -> Vec<Vec<f32>> {
    v.as_array()
        .expect("vectors")
        .iter()
        .map(|r| {
            r.as_array()
                .expect("vector")
                .iter()
                .map(|x| x.as_f64().expect("f") as f32)
                .collect()
        })
        .collect()
}

/// CLS, last-token and no pooling (one vector per token) against llama-embedding's `--pooling`.
#[test]
fn pooling_overrides_match_llama_embedding() {
    let mut e = Embedder::open(&minilm()).expect("open");
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/minilm-embeddings.json");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("read")).expect("json");
    let texts: Vec<&str> = v["texts"].as_array().expect("texts")[..2]
        .iter()
        .map(|t| t.as_str().expect("text"))
        .collect();
    let refs = &v["pooling_overrides"];
    for name in ["cls", "last"] {
        e.set_pooling(name.parse().expect("pooling"));
        let got = e.embed(&texts).expect("embed");
        for (g, w) in got.iter().zip(vectors(&refs[name])) {
            let c = cosine(g, &w);
            println!("{name}: cosine {c:.6}");
            assert!(c >= 0.999, "{name}: cosine {c}");
        }
    }
    e.set_pooling(Pooling::None);
    assert!(
        e.embed(&texts).is_err(),
        "no pooling: one vector per token only"
    );
    let got = e.token_embeddings(texts[0]).expect("tokens");
    let want = vectors(&refs["none"]);
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        let c = cosine(g, w);
        assert!(c >= 0.999, "none: cosine {c}");
    }
    assert!("max".parse::<Pooling>().is_err());
}

/// A split GGUF of MiniLM (llama.cpp's `gguf-split` layout, three parts written here): opened
/// from part 1 it gives the whole file's vectors bit for bit; part 2 first is an error.
#[test]
fn split_gguf_embeds_like_the_whole_file() {
    let file = ggweb::gguf::GgufFile::open(minilm()).expect("open");
    let dir = std::env::temp_dir().join(format!("ggweb-bert-split-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let parts = split::write_split(&file, &dir, "minilm", 3, file.header().tensors.len() as i32);
    let texts = ["A man is eating food.", "A man is eating a piece of bread."];
    let whole = Embedder::open(&minilm())
        .expect("open")
        .embed(&texts)
        .expect("embed");
    let split = Embedder::open(&parts[0])
        .expect("open split")
        .embed(&texts)
        .expect("embed");
    assert!(whole == split, "split model's vectors differ");
    let e = Embedder::open(&parts[1]).err().expect("part 2 first");
    assert!(e.to_string().contains("open part 1"), "{e}");
    std::fs::remove_dir_all(&dir).expect("clean up");
}
