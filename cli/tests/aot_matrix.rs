//! The case matrix of the ahead-of-time tests: every op and reduction on every dtype with
//! a byte layout, i32 and i64 indices, and per key cases that reach each path of the
//! generated code (row-major operands, rows of equal indices, strided and negative-stride
//! views, in place, an out-of-bounds index). `tests/c/aot_cases.c` runs them on the
//! machine under test; [`check`] compares what it prints with the reference interpreter.

use scatterjit::ir::{interp, Error as IrError};
use scatterjit::{DType, KernelKey, OpKind, Reduction, Tensor};
use scatterjit_testkit::suite::SplitMix64;
use scatterjit_testkit::values::{self, Sample};

/// The keys of the matrix: ScatterElements along either axis with every reduction that
/// applies (with and without the initial values; mean with its workspace), GatherElements
/// along either axis, Gather of rows and of elements of rows.
pub fn keys() -> Vec<KernelKey> {
    let mut keys = Vec::new();
    for &dtype in DType::ALL.iter().filter(|&&d| d != DType::String) {
        for index in [DType::I32, DType::I64] {
            for axis in 0..2 {
                for &r in Reduction::ALL {
                    if !r.supports(dtype) {
                        continue;
                    }
                    for init in [true, false] {
                        let key = KernelKey::scatter_elements(dtype, index, 2, axis, r, init)
                            .expect("a scatter key");
                        if !keys.contains(&key) {
                            keys.push(key);
                        }
                    }
                }
                keys.push(KernelKey::gather_elements(dtype, index, 2, axis).expect("a key"));
            }
            keys.push(KernelKey::gather(dtype, index, 2, 1, 0).expect("a gather key"));
            keys.push(KernelKey::gather(dtype, index, 2, 2, 1).expect("a gather key"));
        }
    }
    keys
}

/// The C source of `kernels[]` (the entry of each key, in order) and `workspaces[]` (the
/// header's workspace size function of each key that needs one, else NULL).
pub fn table(keys: &[KernelKey]) -> String {
    let mut c = String::from(
        "#include \"kernels.h\"\n\ntypedef int32_t (*kernel_fn)(sj_args *args);\n\
         typedef uint64_t (*workspace_fn)(const sj_tensor *out);\n\
         const kernel_fn kernels[] = {\n",
    );
    for key in keys {
        c += &format!("    {},\n", scatterjit::aot::symbol(key));
    }
    c += "};\nconst workspace_fn workspaces[] = {\n";
    for key in keys {
        match key.reduction() == Reduction::Mean {
            true => c += &format!("    {}_workspace_bytes,\n", scatterjit::aot::symbol(key)),
            false => c += "    NULL,\n",
        }
    }
    c += &format!("}};\nconst int64_t kernel_count = {};\n", keys.len());
    c
}

/// An operand as it lies in the memory the C program gets: its element strides, the
/// byte offset of element 0 and the whole buffer (elements and the gaps between them).
#[derive(Clone)]
struct Placed {
    tensor: Tensor,
    /// `None`: row-major, passed as NULL strides.
    strides: Option<Vec<i64>>,
    offset: usize,
    bytes: Vec<u8>,
}

/// Lays `tensor` out with `strides` (row-major if `None`) in a buffer whose gaps hold
/// `rng`'s bytes.
fn place(tensor: &Tensor, strides: Option<Vec<i64>>, rng: &mut SplitMix64) -> Placed {
    let size = tensor.dtype().size();
    let (mut low, mut high) = (0i64, 0i64);
    for (&n, &s) in tensor.shape().iter().zip(&steps(tensor.shape(), &strides)) {
        let reach = (n as i64 - 1).max(0) * s;
        low += reach.min(0);
        high += reach.max(0);
    }
    let len = if tensor.numel() == 0 {
        0
    } else {
        (high - low + 1) as usize
    };
    let gaps: Vec<u8> = (0..len * size).map(|_| rng.next_u64() as u8).collect();
    let mut placed = Placed {
        tensor: tensor.clone(),
        strides,
        offset: (-low) as usize * size,
        bytes: gaps,
    };
    placed.bytes = placed.with_elements(tensor);
    placed
}

/// Element strides: `strides`, or row-major ones for `shape`.
fn steps(shape: &[usize], strides: &Option<Vec<i64>>) -> Vec<i64> {
    strides.clone().unwrap_or_else(|| {
        scatterjit::ir::row_major_strides(shape)
            .iter()
            .map(|&s| s as i64)
            .collect()
    })
}

impl Placed {
    /// This buffer with its elements replaced by `values`' (of the same shape), the gaps
    /// as they are.
    fn with_elements(&self, values: &Tensor) -> Vec<u8> {
        let mut bytes = self.bytes.clone();
        let size = values.dtype().size();
        let steps = steps(values.shape(), &self.strides);
        for flat in 0..values.numel() {
            let position = scatterjit::ir::unravel(flat, values.shape());
            let at: i64 = position
                .iter()
                .zip(&steps)
                .map(|(&p, &s)| p as i64 * s)
                .sum();
            let at = (self.offset as i64 + at * size as i64) as usize;
            bytes[at..at + size].copy_from_slice(&values.bytes()[flat * size..(flat + 1) * size]);
        }
        bytes
    }
}

/// Random element values that keep every result exact and free of NaN: floats are small
/// multiples of 1/2 (and -0.0), bools 0 or 1, integers any bits.
fn values(dtype: DType, shape: &[usize], rng: &mut SplitMix64) -> Tensor {
    let n: usize = shape.iter().product();
    let float = |rng: &mut SplitMix64| match rng.below(12) {
        0 => -0.0,
        k => (k as f64 - 6.0) * 0.5,
    };
    let samples = (0..n).map(|_| Sample {
        re: float(rng),
        im: float(rng),
        bits: rng.next_u64(),
    });
    let bytes = values::bytes(dtype, samples);
    Tensor::from_bytes(dtype, shape.to_vec(), bytes).expect("values of the shape")
}

/// Indices into a dim of `bound` elements: in range, a quarter of them in their negative
/// form; with `uniform`, equal along each row (the last dim).
fn indices(
    dtype: DType,
    shape: &[usize],
    bound: usize,
    uniform: bool,
    rng: &mut SplitMix64,
) -> Tensor {
    let n: usize = shape.iter().product();
    let row = shape.last().copied().unwrap_or(1).max(1);
    let mut picks: Vec<i64> = Vec::with_capacity(n);
    for i in 0..n {
        if uniform && i % row != 0 {
            picks.push(picks[i - 1]);
            continue;
        }
        let k = rng.below(bound) as i64;
        picks.push(if rng.below(4) == 0 {
            k - bound as i64
        } else {
            k
        });
    }
    index_tensor(dtype, shape, &picks)
}

fn index_tensor(dtype: DType, shape: &[usize], picks: &[i64]) -> Tensor {
    match dtype {
        DType::I32 => {
            let v: Vec<i32> = picks.iter().map(|&k| k as i32).collect();
            Tensor::from_slice(shape, &v)
        }
        DType::I64 => Tensor::from_slice(shape, picks),
        other => panic!("the matrix has no {other} indices"),
    }
    .expect("indices of the shape")
}

/// How a case lays out its operands.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Layout {
    /// Every operand row-major, NULL strides.
    RowMajor,
    /// Row-major, and the indices equal along each row.
    UniformRows,
    /// Inputs transposed, with negative strides or with padded rows.
    Strided,
    /// A scatter whose out is its data.
    InPlace,
    /// One index out of bounds.
    OutOfBounds,
}

/// One case: the kernel, the operands and the initial out.
pub struct Case {
    kernel: usize,
    layout: Layout,
    data: Placed,
    indices: Placed,
    updates: Option<Placed>,
    /// Out as the program starts with it (data's buffer, in place).
    out: Placed,
}

/// Random element strides for an input of `shape` (rank 2): transposed, rows reversed, or
/// rows padded (unit inner steps, so the contiguous variant still applies).
fn strides(shape: &[usize], rng: &mut SplitMix64) -> Vec<i64> {
    let (rows, cols) = (shape[0] as i64, shape[1] as i64);
    match rng.below(3) {
        0 => vec![1, rows],
        1 => vec![-cols, 1],
        _ => vec![cols + 3, 1],
    }
}

/// Five cases per key, one per [`Layout`] (no in-place case for the gathers).
pub fn cases(keys: &[KernelKey]) -> Vec<Case> {
    let mut rng = SplitMix64(0x5ca7_7e41);
    let mut cases = Vec::new();
    for (kernel, key) in keys.iter().enumerate() {
        for layout in [
            Layout::RowMajor,
            Layout::UniformRows,
            Layout::Strided,
            Layout::InPlace,
            Layout::OutOfBounds,
        ] {
            if layout == Layout::InPlace && key.kind() != OpKind::ScatterElements {
                continue;
            }
            cases.push(case(kernel, key, layout, &mut rng));
        }
    }
    cases
}

fn case(kernel: usize, key: &KernelKey, layout: Layout, rng: &mut SplitMix64) -> Case {
    let dtype = key.dtype();
    let index_dtype = key.index_dtype();
    // Rows from one element to past the 128 bytes where row copies call memcpy.
    let shape = [1 + rng.below(5), rng.pick(&[1, 3, 8, 17, 40, 130])];
    let data = values(dtype, &shape, rng);
    let axis = key.axis();
    let bound = shape[axis];
    let uniform = layout == Layout::UniformRows;
    let (index_shape, updates) = match key.kind() {
        OpKind::ScatterElements | OpKind::GatherElements => {
            let mut s = [1 + rng.below(shape[0]), 1 + rng.below(shape[1])];
            if rng.below(2) == 0 {
                s[1] = shape[1];
            }
            let updates = (key.kind() == OpKind::ScatterElements).then(|| values(dtype, &s, rng));
            (s.to_vec(), updates)
        }
        OpKind::Gather if key.index_rank() == 1 => (vec![rng.below(6)], None),
        OpKind::Gather => (vec![1 + rng.below(3), 1 + rng.below(4)], None),
    };
    let mut picks = indices(index_dtype, &index_shape, bound, uniform, rng);
    if layout == Layout::OutOfBounds && picks.numel() > 0 {
        let mut all: Vec<i64> = match index_dtype {
            DType::I32 => picks
                .to_vec::<i32>()
                .unwrap()
                .iter()
                .map(|&k| k.into())
                .collect(),
            _ => picks.to_vec::<i64>().unwrap(),
        };
        let at = rng.below(all.len());
        all[at] = if rng.below(2) == 0 {
            (bound + rng.below(3)) as i64
        } else {
            -(bound as i64) - 1 - rng.below(3) as i64
        };
        picks = index_tensor(index_dtype, &index_shape, &all);
    }
    let strided = layout == Layout::Strided;
    let input = |t: &Tensor, rng: &mut SplitMix64| {
        let s = (strided && t.shape().len() == 2).then(|| strides(t.shape(), rng));
        place(t, s, rng)
    };
    let data = input(&data, rng);
    let indices = input(&picks, rng);
    let updates = updates.map(|u| input(&u, rng));
    let out = if layout == Layout::InPlace {
        data.clone()
    } else {
        let shape = expected_shape(key, &data.tensor, &indices.tensor);
        let n: usize = shape.iter().product();
        let garbage: Vec<u8> = (0..n * dtype.size())
            .map(|_| match dtype {
                DType::Bool => rng.below(2) as u8,
                _ => rng.next_u64() as u8,
            })
            .collect();
        let t = Tensor::from_bytes(dtype, shape, garbage).expect("out of the shape");
        place(&t, None, rng)
    };
    Case {
        kernel,
        layout,
        data,
        indices,
        updates,
        out,
    }
}

/// The out shape the op infers (also for a case with an out-of-bounds index).
fn expected_shape(key: &KernelKey, data: &Tensor, indices: &Tensor) -> Vec<usize> {
    match key.kind() {
        OpKind::ScatterElements => data.shape().to_vec(),
        OpKind::GatherElements => indices.shape().to_vec(),
        OpKind::Gather => {
            let axis = key.axis();
            let mut s = data.shape()[..axis].to_vec();
            s.extend(indices.shape());
            s.extend(&data.shape()[axis + 1..]);
            s
        }
    }
}

/// The case file `tests/c/aot_cases.c` reads (its format is described there).
pub fn encode(cases: &[Case]) -> Vec<u8> {
    let mut file = Vec::new();
    let word = |file: &mut Vec<u8>, v: i64| file.extend(v.to_le_bytes());
    for case in cases {
        word(&mut file, case.kernel as i64);
        word(&mut file, i64::from(case.layout == Layout::InPlace));
        let out = (case.layout != Layout::InPlace).then_some(&case.out);
        for operand in [
            Some(&case.data),
            Some(&case.indices),
            case.updates.as_ref(),
            out,
        ] {
            let Some(p) = operand else {
                word(&mut file, 0);
                continue;
            };
            word(&mut file, 1);
            let code = scatterjit::cabi::dtype_code(p.tensor.dtype()).expect("a DLPack dtype");
            word(&mut file, code.into());
            word(&mut file, p.tensor.shape().len() as i64);
            for &d in p.tensor.shape() {
                word(&mut file, d as i64);
            }
            word(&mut file, i64::from(p.strides.is_some()));
            for &s in p.strides.iter().flatten() {
                word(&mut file, s);
            }
            word(&mut file, p.offset as i64);
            word(&mut file, p.bytes.len() as i64);
            file.extend(&p.bytes);
            file.resize(file.len().next_multiple_of(8), 0);
        }
    }
    file
}

/// Compares each line the case runner printed on `machine` with the interpreter: on
/// success out holds the result (in place: in data's layout, the gaps untouched); on a bad
/// index the status, the position of the first bad index, and out unchanged.
pub fn check(keys: &[KernelKey], cases: &[Case], output: &str, machine: &str) {
    let lines: Vec<&str> = output.lines().collect();
    assert_eq!(lines.len(), cases.len(), "{machine}: one line per case");
    for (n, (case, line)) in cases.iter().zip(&lines).enumerate() {
        let key = &keys[case.kernel];
        let what = format!("{machine}: case {n} ({key}, {:?})", case.layout);
        let words: Vec<&str> = line.split(' ').collect();
        let [_, number, _, status, _, bad, _, out] = words[..] else {
            panic!("{what}: unexpected line {line:?}");
        };
        assert_eq!(number, n.to_string(), "{what}");
        let status: i32 = status.parse().expect("a status");
        let out: Vec<u8> = (0..out.len() / 2)
            .map(|i| u8::from_str_radix(&out[2 * i..2 * i + 2], 16).expect("hex"))
            .collect();
        let expected = interp::run(
            &key.op(),
            &case.data.tensor,
            &case.indices.tensor,
            case.updates.as_ref().map(|u| &u.tensor),
        );
        match expected {
            Ok(result) => {
                assert_eq!((status, bad), (0, "-"), "{what}: status");
                let expected = match case.layout {
                    Layout::InPlace => case.out.with_elements(&result),
                    _ => result.bytes().to_vec(),
                };
                assert!(
                    out == expected,
                    "{what}: out\n{out:02x?}\nexpected\n{expected:02x?}"
                );
            }
            Err(IrError::IndexOutOfBounds { position, .. }) => {
                assert_eq!(
                    case.layout,
                    Layout::OutOfBounds,
                    "{what}: only these cases have a bad index"
                );
                let position: Vec<String> = position.iter().map(|p| p.to_string()).collect();
                let position = match position.is_empty() {
                    true => "-".to_string(),
                    false => position.join(","),
                };
                assert_eq!((status, bad), (6, position.as_str()), "{what}: bad index");
                assert!(out == case.out.bytes, "{what}: out must be unchanged");
            }
            Err(e) => panic!("{what}: the interpreter rejects the case: {e}"),
        }
    }
}
