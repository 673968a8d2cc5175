//! The fuzz targets' bounded pass on stable Rust: every file of each target's seed corpus
//! (`fuzz/corpus/<target>/`, crash reproducers included), then a fixed number of
//! deterministic mutations of them, through the same bodies the cargo-fuzz targets run
//! (`scatterjit_testkit::fuzzing`, `scatterjit_cli::fuzz`). The generated seeds live here; `BLESS=1` rewrites them.

use std::fs;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

use scatterjit::ir::{DType, KernelKey, OpKind, Reduction, Tensor};
use scatterjit_cli::{fuzz, npy};
use scatterjit_testkit::suite::SplitMix64;
use scatterjit_testkit::{fuzz_capi, fuzzing};

/// One fuzz target: its body, its generated seeds, and how many mutations the replay runs.
struct Target {
    name: &'static str,
    body: fn(&[u8]),
    seeds: fn() -> Vec<(String, Vec<u8>)>,
    mutations: usize,
}

const NPY_READER: Target = Target {
    name: "npy_reader",
    body: fuzz::npy_reader,
    seeds: npy_seeds,
    mutations: 3000,
};

const KEY_AND_SHAPES: Target = Target {
    name: "key_and_shapes",
    body: fuzzing::key_and_shapes,
    seeds: key_seeds,
    mutations: 3000,
};

// Each new kernel key compiles, which dominates this one's time in debug builds.
const DIFFERENTIAL: Target = Target {
    name: "differential",
    body: fuzzing::differential,
    seeds: differential_seeds,
    mutations: 300,
};

// Each new key compiles once (the Rust side reads the C ABI's cache), which dominates.
const CAPI: Target = Target {
    name: "capi",
    body: fuzz_capi::capi,
    seeds: capi_seeds,
    mutations: 300,
};

fn corpus_dir(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target)
}

/// Every file of the target's corpus, sorted by name.
fn corpus(target: &Target) -> Vec<(String, Vec<u8>)> {
    let dir = corpus_dir(target.name);
    let mut files: Vec<(String, Vec<u8>)> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, fs::read(&path).unwrap())
        })
        .collect();
    files.sort();
    files
}

/// Runs one input; a broken promise fails the test naming the input.
fn run_one(target: &Target, name: &str, input: &[u8]) {
    if catch_unwind(AssertUnwindSafe(|| (target.body)(input))).is_err() {
        panic!(
            "fuzz target {} broke a promise on {name}: {:02x?}",
            target.name, input
        );
    }
}

/// libFuzzer-style mutations: flip, set or insert bytes, delete or duplicate a range,
/// truncate, or splice in part of another input.
fn mutate(rng: &mut SplitMix64, input: &[u8], other: &[u8]) -> Vec<u8> {
    const INTERESTING: [u8; 8] = [0, 1, 0x7f, 0x80, 0xc0, 0xe0, 0xf8, 0xff];
    let mut out = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(out.len() + 1);
        match rng.below(8) {
            0 if at < out.len() => out[at] ^= 1 << rng.below(8),
            1 if at < out.len() => out[at] = rng.next_u64() as u8,
            2 if at < out.len() => out[at] = INTERESTING[rng.below(INTERESTING.len())],
            3 => out.insert(at, rng.next_u64() as u8),
            4 => {
                let end = (at + 1 + rng.below(8)).min(out.len());
                out.drain(at.min(end)..end);
            }
            5 if at < out.len() => {
                let end = (at + 1 + rng.below(16)).min(out.len());
                let copy = out[at..end].to_vec();
                out.splice(at..at, copy);
            }
            6 => out.truncate(at),
            _ => {
                let from = rng.below(other.len() + 1);
                let end = (from + rng.below(32)).min(other.len());
                out.splice(at..at, other[from..end].iter().copied());
            }
        }
    }
    out
}

fn replay(target: &Target) {
    let files = corpus(target);
    assert!(
        files.len() >= 20,
        "{}: seed corpus has {} files",
        target.name,
        files.len()
    );
    for (name, input) in &files {
        run_one(target, name, input);
    }
    let mut rng = SplitMix64(0x5ca7_7e12);
    for i in 0..target.mutations {
        let (name, input) = &files[rng.below(files.len())];
        let (_, other) = &files[rng.below(files.len())];
        let mutated = mutate(&mut rng, input, other);
        run_one(target, &format!("mutation {i} of {name}"), &mutated);
    }
}

#[test]
fn npy_reader() {
    replay(&NPY_READER);
}

#[test]
fn key_and_shapes() {
    replay(&KEY_AND_SHAPES);
}

#[test]
fn differential() {
    replay(&DIFFERENTIAL);
}

#[test]
fn capi() {
    replay(&CAPI);
}

/// The corpus holds every generated seed, byte for byte (`BLESS=1` writes them).
#[test]
fn seed_corpus_is_current() {
    let bless = std::env::var_os("BLESS").is_some();
    for target in [&NPY_READER, &KEY_AND_SHAPES, &DIFFERENTIAL, &CAPI] {
        let dir = corpus_dir(target.name);
        for (name, bytes) in (target.seeds)() {
            let path = dir.join(format!("seed-{name}"));
            if bless {
                fs::create_dir_all(&dir).unwrap();
                fs::write(&path, &bytes).unwrap();
            } else {
                let stored = fs::read(&path).unwrap_or_default();
                assert!(
                    stored == bytes,
                    "{} differs from its generator; rerun with BLESS=1",
                    path.display()
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Seeds

/// Valid files of every dtype, header texts of every shape numpy writes or a hostile file
/// might, and broken preambles.
fn npy_seeds() -> Vec<(String, Vec<u8>)> {
    let mut seeds = Vec::new();
    for (i, &dtype) in DType::ALL
        .iter()
        .filter(|&&d| d != DType::String)
        .enumerate()
    {
        let shape: &[usize] = [&[][..], &[3], &[2, 2], &[0, 4], &[1, 2, 1]][i % 5];
        let n: usize = shape.iter().product::<usize>() * dtype.size();
        let bytes = (0..n).map(|b| (b % 2) as u8).collect();
        let t = Tensor::from_bytes(dtype, shape.to_vec(), bytes).unwrap();
        let mut seed = vec![0u8];
        seed.extend(npy::to_bytes(&t, dtype.npy_descr()).unwrap());
        seeds.push((format!("valid-{dtype}"), seed));
    }
    let headers: &[(&str, &str, &[u8])] = &[
        (
            "python2",
            "{\"shape\":(1L,),'fortran_order' :False ,  'descr':u'<i4'}",
            &[7, 0, 0, 0],
        ),
        (
            "fortran",
            "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }",
            &[0; 16],
        ),
        (
            "big-endian",
            "{'descr': '>f8', 'fortran_order': False, 'shape': (1,), }",
            &[0; 8],
        ),
        (
            "string",
            "{'descr': '<U3', 'fortran_order': False, 'shape': (1,), }",
            &[0x61, 0, 0, 0, 0x62, 0, 0, 0, 0, 0, 0, 0],
        ),
        (
            "structured",
            "{'descr': [('a', '<i4'), ('b', '<f4')], 'fortran_order': False, 'shape': (1,)}",
            &[0; 8],
        ),
        (
            "huge-shape",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,), }",
            &[0; 4],
        ),
        (
            "overflowing-shape",
            "{'descr': '<c16', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4), }",
            &[],
        ),
        (
            "zero-dim",
            "{'descr': '<i8', 'fortran_order': False, 'shape': (0, 18446744073709551615), }",
            &[],
        ),
        (
            "trailing",
            "{'descr': '|u1', 'fortran_order': False, 'shape': (2,), }",
            &[1, 2, 3],
        ),
        (
            "bad-bool",
            "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }",
            &[0, 1, 2],
        ),
        (
            "bfloat16",
            "{'descr': '<V2', 'fortran_order': False, 'shape': (2,), }",
            &[0x80, 0x3f, 0, 0xc0],
        ),
        (
            "escapes",
            "{'descr': '<\\x66\\x34', 'fortran_order': False, 'shape': (), }",
            &[0; 4],
        ),
        (
            "nested",
            "{'descr': [[[[[[[[[[[[[[[[['<f4']]]]]]]]]]]]]]]]], 'fortran_order': False, 'shape': ()}",
            &[0; 4],
        ),
        (
            "duplicate-key",
            "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': ()}",
            &[0; 4],
        ),
        (
            "negative-dim",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }",
            &[],
        ),
    ];
    for (i, (name, text, payload)) in headers.iter().enumerate() {
        let mut seed = vec![0x80 + (i % 3) as u8];
        seed.extend_from_slice(text.as_bytes());
        seed.push(b'\n');
        seed.extend_from_slice(payload);
        seeds.push((format!("header-{name}"), seed));
    }
    let valid = {
        let t = Tensor::from_slice(&[2, 2], &[1i32, -2, 3, -4]).unwrap();
        npy::to_bytes(&t, "<i4").unwrap()
    };
    let header_end = valid.len() - 16;
    let mut cut = |name: &str, bytes: &[u8]| {
        let mut seed = vec![0u8];
        seed.extend_from_slice(bytes);
        seeds.push((name.to_string(), seed));
    };
    cut("bad-magic", b"PK\x03\x04 not npy at all");
    cut("truncated-preamble", &valid[..9]);
    cut("truncated-header", &valid[..header_end - 5]);
    cut("truncated-payload", &valid[..valid.len() - 1]);
    let mut v4 = valid.clone();
    v4[6] = 4;
    cut("version-4", &v4);
    let mut long = valid.clone();
    long[8..10].copy_from_slice(&u16::MAX.to_le_bytes());
    cut("header-length-too-long", &long);
    seeds
}

/// The bytes `fuzzing::key_and_shapes` reads for a key text, an op and its operands (dims
/// below 6), and a view.
#[allow(clippy::too_many_arguments)]
fn key_seed(
    text: &str,
    kind: OpKind,
    axis: i64,
    reduction: Reduction,
    dtype: DType,
    index_dtype: DType,
    data: &[usize],
    indices: &[usize],
    view: (&[usize], &[isize], usize, u16),
) -> Vec<u8> {
    let position = |all: &[DType], d: DType| all.iter().position(|&x| x == d).unwrap() as u8;
    let mut out = vec![text.len() as u8];
    out.extend_from_slice(text.as_bytes());
    out.push(OpKind::ALL.iter().position(|&k| k == kind).unwrap() as u8);
    out.push((axis + 10) as u8);
    out.push(Reduction::ALL.iter().position(|&r| r == reduction).unwrap() as u8);
    out.push(1); // use_init_val
    out.push(position(DType::ALL, dtype));
    out.push(position(DType::ALL, index_dtype));
    out.push(0); // updates' dtype is data's
    out.push(data.len() as u8);
    out.extend(data.iter().map(|&d| d as u8));
    if kind == OpKind::Gather {
        out.push(indices.len() as u8);
    } else {
        out.push(0); // index rank is data's
    }
    out.extend(indices.iter().map(|&d| 128 + d as u8)); // any dim: d
    out.push(0); // updates only for scatter
    out.push(0); // updates' rank is indices'
    out.extend(indices.iter().map(|_| 0)); // updates' dims are indices'
    let (shape, strides, offset, len) = view;
    out.push(position(DType::ALL, DType::F32));
    out.push(shape.len() as u8);
    for &d in shape {
        out.extend([0, d as u8]);
    }
    out.push(0); // a stride per dim
    out.extend(strides.iter().map(|&s| (s + 4) as u8));
    out.extend([0, offset as u8]);
    out.extend(len.to_le_bytes());
    out
}

fn key_seeds() -> Vec<(String, Vec<u8>)> {
    let mut seeds = Vec::new();
    let dtypes = [
        DType::F32,
        DType::BF16,
        DType::I64,
        DType::Bool,
        DType::Complex64,
        DType::U8,
        DType::F16,
        DType::String,
    ];
    let index_dtypes = [DType::I64, DType::I32, DType::U8, DType::F32];
    let views: [(&[usize], &[isize], usize, u16); 4] = [
        (&[2, 3], &[3, 1], 0, 24),
        (&[2, 3], &[-3, 1], 3, 24),
        (&[4, 1], &[0, 4], 0, 4),
        (&[3, 2], &[1, 3], 1, 20),
    ];
    for (k, &kind) in OpKind::ALL.iter().enumerate() {
        for (i, &dtype) in dtypes.iter().enumerate() {
            let n = k * dtypes.len() + i;
            let index_dtype = index_dtypes[n % index_dtypes.len()];
            let reduction = Reduction::ALL[n % Reduction::ALL.len()];
            let (data, indices, axis): (&[usize], &[usize], i64) = match n % 3 {
                0 => (&[3, 4], &[2, 4], 0),
                1 => (&[2, 3, 4], &[2, 3, 5], -1),
                _ => (&[5], &[2], 0),
            };
            let key = match kind {
                OpKind::ScatterElements => KernelKey::scatter_elements(
                    dtype,
                    index_dtype,
                    data.len(),
                    axis,
                    reduction,
                    n % 2 == 0,
                ),
                OpKind::GatherElements => {
                    KernelKey::gather_elements(dtype, index_dtype, data.len(), axis)
                }
                OpKind::Gather => {
                    KernelKey::gather(dtype, index_dtype, data.len(), indices.len(), axis)
                }
            };
            let text = key.map_or_else(
                |_| "scatter_elements.f32.i64.r2.a1.add".into(),
                |k| k.to_string(),
            );
            let seed = key_seed(
                &text,
                kind,
                axis,
                reduction,
                dtype,
                index_dtype,
                data,
                indices,
                views[n % views.len()],
            );
            seeds.push((format!("{kind}-{dtype}-{n}"), seed));
        }
    }
    // Edges: a huge dim, a key string with a wrapped axis, an empty input.
    let text = "gather.f32.i64.r2.q1.a18446744073709551615";
    let mut huge = key_seed(
        text,
        OpKind::Gather,
        0,
        Reduction::None,
        DType::F64,
        DType::I64,
        &[3, 4],
        &[2],
        views[0],
    );
    // After the text: kind, axis, reduction, init, three dtype bytes, rank; then dim 0.
    huge[1 + text.len() + 8] = 200; // usize::MAX
    seeds.push(("huge-dim".into(), huge));
    seeds.push(("empty".into(), Vec::new()));
    seeds
}

/// A problem's leading choices for `fuzzing::differential` (op, dtype, index dtype, rank,
/// axis, reduction), then SplitMix64 bytes for dims, elements and layouts.
fn differential_seeds() -> Vec<(String, Vec<u8>)> {
    let values: Vec<DType> = DType::ALL
        .iter()
        .copied()
        .filter(|&d| d != DType::String)
        .collect();
    let mut seeds = Vec::new();
    for (k, &kind) in OpKind::ALL.iter().enumerate() {
        for (i, &dtype) in values.iter().enumerate() {
            let n = k * values.len() + i;
            let rank = 1 + n % 3;
            let mut seed = vec![k as u8, i as u8, (8 * (n % 8)) as u8, (rank - 1) as u8];
            if kind == OpKind::Gather {
                seed.push((n % 3) as u8);
            }
            seed.push((16 * (n % (2 * rank))) as u8); // axis
            seed.push((n % Reduction::ALL.len()) as u8);
            seed.push(n as u8 & 1);
            let mut rng = SplitMix64(n as u64);
            seed.extend((0..256).map(|_| rng.next_u64() as u8));
            seeds.push((format!("{kind}-{dtype}"), seed));
        }
        // Strings (the dtype after the others): every reduction for scatter.
        let reductions = if kind == OpKind::ScatterElements {
            Reduction::ALL
        } else {
            &[Reduction::None]
        };
        for (j, &reduction) in reductions.iter().enumerate() {
            let rank = 1 + j % 2;
            let mut seed = vec![k as u8, values.len() as u8, 8 * j as u8, (rank - 1) as u8];
            if kind == OpKind::Gather {
                seed.push(1);
            }
            seed.push(16 * (rank as u8)); // axis 0
            seed.push(Reduction::ALL.iter().position(|&r| r == reduction).unwrap() as u8);
            seed.push(1);
            let mut rng = SplitMix64(500 + (k * 8 + j) as u64);
            seed.extend((0..256).map(|_| rng.next_u64() as u8));
            seeds.push((format!("{kind}-str-{reduction}"), seed));
        }
    }
    seeds
}

/// A valid key's choices for `fuzz_capi::capi` (op, dtype, index dtype, rank, index rank,
/// axis, reduction, init), then SplitMix64 bytes for the descriptors, buffers and values:
/// each descriptor field is broken about 1 time in 32.
fn capi_seeds() -> Vec<(String, Vec<u8>)> {
    let values: Vec<DType> = DType::ALL
        .iter()
        .copied()
        .filter(|&d| d != DType::String)
        .collect();
    let ints: Vec<DType> = DType::ALL
        .iter()
        .copied()
        .filter(|d| d.is_integer())
        .collect();
    let mut seeds = Vec::new();
    for (k, &kind) in OpKind::ALL.iter().enumerate() {
        for (i, &dtype) in values.iter().enumerate() {
            let n = k * values.len() + i;
            let rank = 1 + n % 3;
            let mut seed = vec![k as u8, i as u8, (n % ints.len()) as u8, (rank - 1) as u8];
            seed.push((n % 3) as u8); // index rank (Gather only)
            seed.push((n % rank) as u8); // axis
            seed.push((n % Reduction::ALL.len()) as u8);
            if kind == OpKind::ScatterElements {
                seed.push(0xff); // init
            }
            seed.push(0); // the key text as printed
            seed.extend([1, 1]); // the shared cache, a key
            let mut rng = SplitMix64(1000 + n as u64);
            seed.extend((0..512).map(|_| rng.next_u64() as u8));
            seeds.push((format!("{kind}-{dtype}"), seed));
        }
    }
    // A data descriptor whose reach overflows an i128 (it panicked in the C ABI): rank 3,
    // dims isize::MAX, strides isize::MIN.
    let kind = OpKind::ALL
        .iter()
        .position(|&k| k == OpKind::GatherElements)
        .unwrap();
    let f32_at = values.iter().position(|&d| d == DType::F32).unwrap();
    let i64_at = ints.iter().position(|&d| d == DType::I64).unwrap();
    let mut seed = vec![kind as u8, f32_at as u8, i64_at as u8, 2, 0, 0, 0, 0, 1, 1];
    seed.extend([2; 10]); // dims of data, indices and updates
    seed.extend([1, 1, 1, 1]); // not NULL, on the CPU, f32, rank 3
    seed.extend([31, 1, 202].repeat(3)); // dims isize::MAX
    seed.extend([1, 3, 193, 193, 193]); // a shape; strides isize::MIN
    seed.extend([0, 1]); // byte offset 0, data not NULL
    seeds.push(("reach-overflows-i128".into(), seed));
    seeds
}
