//! Golden CLIF: a handful of keys print their passes as built; the files live in
//! `tests/golden/<key>.clif`. `BLESS=1 cargo test golden` rewrites them after an
//! intended change to the lowering (review the diff before committing).

use std::path::PathBuf;

use scatterjit::{Kernel, KernelKey};

const KEYS: &[&str] = &[
    "scatter_elements.f32.i64.r2.a1.add",
    "scatter_elements.f16.i32.r2.a1.none",
    "scatter_elements.f16.i64.r1.a0.add",
    "scatter_elements.bf16.i64.r2.a0.max.noinit",
    "scatter_elements.i8.u8.r3.a0.mean.noinit",
    "scatter_elements.c64.i64.r1.a0.mul",
    "gather_elements.f32.i64.r2.a1",
    "gather.f32.i64.r2.q1.a0",
];

fn clif_of(key: &KernelKey) -> String {
    let mut text = String::new();
    for listing in Kernel::listings(*key).unwrap() {
        text.push_str(&format!(
            "; pass {} ({})\n{}\n",
            listing.pass.map_or("?", |p| p.name()),
            listing.variant,
            listing.clif
        ));
    }
    text
}

#[test]
fn golden_clif() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let bless = std::env::var_os("BLESS").is_some_and(|v| v == "1");
    let mut stale = Vec::new();
    for name in KEYS {
        let key: KernelKey = name.parse().unwrap();
        let text = clif_of(&key);
        let path = dir.join(format!("{name}.clif"));
        if bless {
            std::fs::write(&path, &text).unwrap();
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(want) if want == text => {}
            Ok(_) => stale.push(format!("{name}: differs from {}", path.display())),
            Err(e) => stale.push(format!("{name}: {} unreadable: {e}", path.display())),
        }
    }
    assert!(
        stale.is_empty(),
        "golden CLIF out of date (rerun with BLESS=1 if the change is intended):\n{}",
        stale.join("\n")
    );
}
