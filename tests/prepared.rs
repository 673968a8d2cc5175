//! Prepared calls against `Kernel::run_into` and the reference interpreter: the
//! differential suite's random problems (shapes, zero and negative strides, duplicates,
//! out-of-range indices), each prepared once and run on two sets of buffers, on 1 and 3
//! threads, bit-identical to `run_into` on views of the same buffers (gaps included), with
//! the same errors and nothing written on error; and buffers of the wrong size. And the
//! bindings a kernel keeps for geometries its ordinary calls repeat: four calls of one
//! geometry in a row in each form, against the interpreter; and the calls each thread
//! keeps for the free functions: six calls of one op, dtypes and shapes in a row.

use std::sync::Arc;

use proptest::prelude::*;
use scatterjit::ir::{interp, DType, Op, Tensor};
use scatterjit::{
    Error, Geometry, Kernel, KernelCache, KernelKey, Prepared, TensorView, TensorViewMut,
};
use scatterjit_testkit::fuzzing::{pools, Strided};
use scatterjit_testkit::values::same_values;

use crate::differential::{
    case, distinct_init_case, engine_case, lay_out, picked_lines_case, wide_gather_case, Case,
    Layout,
};

/// The buffers of one call: data, indices, updates, and a garbage-filled output.
struct Buffers {
    data: Strided,
    indices: Strided,
    updates: Option<Strided>,
    out: Strided,
}

fn geometry(t: &Tensor, s: &Strided) -> Geometry {
    Geometry::new(t.shape(), &s.strides, s.offset)
}

/// `case`'s tensors laid out as its layouts say; the geometry depends on `layout_seed`
/// only, so two value seeds give buffers of one geometry.
fn buffers(
    case: &Case,
    layout_seed: u64,
    out_shape: &[usize],
    dtype: DType,
) -> (Buffers, [Tensor; 2]) {
    let (data, indices, updates) = case.tensors();
    let axis = normalized_axis(case);
    let zeros = Tensor::zeros(dtype, out_shape.to_vec()).unwrap();
    let mut out = lay_out(&zeros, Layout::Padded, axis, layout_seed ^ 0xff);
    out.bytes.fill(if dtype == DType::Bool { 1 } else { 0x5A });
    let b = Buffers {
        data: lay_out(&data, case.layouts[0], axis, layout_seed),
        indices: lay_out(&indices, case.layouts[1], axis, layout_seed + 1),
        updates: updates
            .as_ref()
            .map(|u| lay_out(u, case.layouts[2], axis, layout_seed + 2)),
        out,
    };
    (b, [data, indices])
}

fn normalized_axis(case: &Case) -> usize {
    let r = case.data_shape.len() as i64;
    let a = if case.axis < 0 {
        case.axis + r
    } else {
        case.axis
    };
    if (0..r).contains(&a) {
        a as usize
    } else {
        0
    }
}

/// `run_into` on views of `b` (into a copy of its output buffer): the output buffer after
/// the call, and the result.
fn ordinary(
    kernel: &Kernel,
    key: &KernelKey,
    t: &[Tensor; 2],
    updates_t: Option<&Tensor>,
    out_shape: &[usize],
    b: &Buffers,
) -> (Vec<u8>, Result<(), Error>) {
    let dv = TensorView::new(
        key.dtype(),
        t[0].shape(),
        &b.data.strides,
        b.data.offset,
        &b.data.bytes,
    )
    .unwrap();
    let iv = TensorView::new(
        key.index_dtype(),
        t[1].shape(),
        &b.indices.strides,
        b.indices.offset,
        &b.indices.bytes,
    )
    .unwrap();
    let uv = b.updates.as_ref().zip(updates_t).map(|(s, u)| {
        TensorView::new(key.dtype(), u.shape(), &s.strides, s.offset, &s.bytes).unwrap()
    });
    let mut bytes = b.out.bytes.clone();
    let result = {
        let mut ov = TensorViewMut::new(
            key.dtype(),
            out_shape,
            &b.out.strides,
            b.out.offset,
            &mut bytes,
        )
        .unwrap();
        kernel.run_into(&mut ov, &dv, &iv, uv.as_ref())
    };
    (bytes, result)
}

/// The prepared call on `b` (into a copy of its output buffer).
fn prepared_call(p: &Prepared, b: &Buffers) -> (Vec<u8>, Result<(), Error>) {
    let mut bytes = b.out.bytes.clone();
    let updates = b.updates.as_ref().map(|u| u.bytes.as_slice());
    let result = p.run_into(&mut bytes, &b.data.bytes, &b.indices.bytes, updates);
    (bytes, result)
}

/// Prepares `case` once and runs it on two sets of values; `Err` describes the first
/// disagreement.
fn check(case: &Case) -> Result<(), String> {
    if case.dtype == DType::String {
        return Ok(()); // no byte buffers
    }
    let op: Op = case_op(case);
    let (data_t, indices_t, updates_t) = case.tensors();
    let Ok(validated) = op.validate(
        data_t.meta(),
        indices_t.meta(),
        updates_t.as_ref().map(|u| u.meta()),
    ) else {
        return Ok(()); // nothing to prepare: no kernel has this geometry
    };
    let key = validated.key;
    let kernel: Arc<Kernel> = KernelCache::global().get(&key).map_err(|e| e.to_string())?;
    let out_shape = validated.out_shape;
    let layout_seed = case.seed;
    let (first, t) = buffers(case, layout_seed, &out_shape, key.dtype());
    let zeros = Tensor::zeros(key.dtype(), out_shape.clone()).unwrap();
    let prepared = kernel
        .prepare(
            &geometry(&zeros, &first.out),
            &geometry(&t[0], &first.data),
            &geometry(&t[1], &first.indices),
            first
                .updates
                .as_ref()
                .zip(updates_t.as_ref())
                .map(|(s, u)| geometry(u, s))
                .as_ref(),
        )
        .map_err(|e| format!("{key}: prepare: {e}"))?;
    // A second set of values of the same geometry: another seed, no bad index.
    let mut other = case.clone();
    other.seed = case.seed.wrapping_mul(31).wrapping_add(7);
    other.bad = None;
    let (second, t2) = buffers(&other, layout_seed, &out_shape, key.dtype());
    let updates2 = other.tensors().2;
    for (b, t, u) in [
        (&first, &t, updates_t.as_ref()),
        (&second, &t2, updates2.as_ref()),
    ] {
        let (want_bytes, want) = ordinary(&kernel, &key, t, u, &out_shape, b);
        for (threads, pool) in [1, 3].iter().zip(pools()) {
            let (got_bytes, got) = pool.install(|| prepared_call(&prepared, b));
            if got != want {
                return Err(format!(
                    "{key} on {threads} threads: prepared {got:?}, run_into {want:?}"
                ));
            }
            if got_bytes != want_bytes {
                return Err(format!(
                    "{key} on {threads} threads: prepared and run_into wrote different bytes"
                ));
            }
            if got.is_err() && got_bytes != b.out.bytes {
                return Err(format!("{key}: a failed prepared call wrote its output"));
            }
        }
        // And the interpreter, on what the buffers hold.
        let expected = interp::run(
            &op,
            &view(key.dtype(), &t[0], &b.data),
            &view(key.index_dtype(), &t[1], &b.indices),
            b.updates
                .as_ref()
                .zip(u)
                .map(|(s, u)| view(key.dtype(), u, s))
                .as_ref(),
        );
        match (&expected, &want) {
            (Ok(e), Ok(())) => {
                let mut bytes = want_bytes.clone();
                let ov = TensorViewMut::new(
                    key.dtype(),
                    &out_shape,
                    &b.out.strides,
                    b.out.offset,
                    &mut bytes,
                )
                .unwrap();
                let got = ov.as_view().to_tensor().map_err(|e| e.to_string())?;
                if !same_values(key.dtype(), e.bytes(), got.bytes()) {
                    return Err(format!(
                        "{key}: prepared result differs from the interpreter's"
                    ));
                }
            }
            (Err(e), Err(w)) if w.as_invalid() == Some(e) => {}
            _ => return Err(format!("{key}: interpreter {expected:?}, kernel {want:?}")),
        }
    }
    if let (Some(us), Some(u), Some(u2)) = (&first.updates, &updates_t, &updates2) {
        check_in_place(&kernel, &key, [&first, &second], [&t, &t2], [u, u2], us)?;
    }
    Ok(())
}

/// In place: `Prepared::scatter_in_place` against `Kernel::scatter_in_place` on views of
/// the same buffers (a copy of data's), on 1 and 3 threads.
fn check_in_place(
    kernel: &Arc<Kernel>,
    key: &KernelKey,
    sets: [&Buffers; 2],
    tensors: [&[Tensor; 2]; 2],
    updates: [&Tensor; 2],
    updates_layout: &Strided,
) -> Result<(), String> {
    let prepared = kernel
        .prepare_in_place(
            &geometry(&tensors[0][0], &sets[0].data),
            &geometry(&tensors[0][1], &sets[0].indices),
            &geometry(updates[0], updates_layout),
        )
        .map_err(|e| format!("{key}: prepare_in_place: {e}"))?;
    for ((b, t), u) in sets.into_iter().zip(tensors).zip(updates) {
        let s = b.updates.as_ref().expect("scatters have updates");
        let mut want_bytes = b.data.bytes.clone();
        let want = {
            let mut dv = TensorViewMut::new(
                key.dtype(),
                t[0].shape(),
                &b.data.strides,
                b.data.offset,
                &mut want_bytes,
            )
            .unwrap();
            let iv = TensorView::new(
                key.index_dtype(),
                t[1].shape(),
                &b.indices.strides,
                b.indices.offset,
                &b.indices.bytes,
            )
            .unwrap();
            let uv =
                TensorView::new(key.dtype(), u.shape(), &s.strides, s.offset, &s.bytes).unwrap();
            kernel.scatter_in_place(&mut dv, &iv, &uv)
        };
        for (threads, pool) in [1, 3].iter().zip(pools()) {
            let mut got_bytes = b.data.bytes.clone();
            let got = pool
                .install(|| prepared.scatter_in_place(&mut got_bytes, &b.indices.bytes, &s.bytes));
            if got != want || got_bytes != want_bytes {
                return Err(format!(
                    "{key} in place on {threads} threads: prepared {got:?}, views {want:?}"
                ));
            }
            if got.is_err() && got_bytes != b.data.bytes {
                return Err(format!("{key}: a failed in-place prepared call wrote data"));
            }
        }
    }
    Ok(())
}

/// Four calls of one geometry in a row, on a fresh kernel, in each form (`run_into`,
/// `run`, and in place for scatters): the first takes the ordinary path, the second binds
/// the geometry when the call is small, the third (with the case's bad index, if any) and
/// fourth run on the binding. Every result is the interpreter's, bit for bit, every error
/// its error, and a failed call writes nothing; on 1 and 3 threads.
fn check_repeated(case: &Case) -> Result<(), String> {
    if case.dtype == DType::String {
        return Ok(());
    }
    let op = case_op(case);
    let (data_t, indices_t, updates_t) = case.tensors();
    let Ok(validated) = op.validate(
        data_t.meta(),
        indices_t.meta(),
        updates_t.as_ref().map(|u| u.meta()),
    ) else {
        return Ok(());
    };
    let (key, out_shape) = (validated.key, validated.out_shape);
    let (dtype, index_dtype) = (key.dtype(), key.index_dtype());
    for (threads, pool) in [1, 3].iter().zip(pools()) {
        let kernel = Kernel::compile(key).map_err(|e| e.to_string())?;
        let mut first_two_ok = true;
        for call in 0..4u64 {
            let mut values = case.clone();
            values.seed = case.seed.wrapping_add(call.wrapping_mul(0x9E37_79B9));
            if call != 2 {
                values.bad = None;
            }
            // One geometry for all four calls: it depends on the layout seed only.
            let (b, t) = buffers(&values, case.seed, &out_shape, dtype);
            let u = values.tensors().2;
            let at = |form: &str| format!("{key}, call {call} ({form}) on {threads} threads");
            let dv = strided_view(dtype, t[0].shape(), &b.data);
            let iv = strided_view(index_dtype, t[1].shape(), &b.indices);
            let uv = (b.updates.as_ref().zip(u.as_ref()))
                .map(|(s, u)| strided_view(dtype, u.shape(), s));
            let expected = interp::run(
                &op,
                &dv.to_tensor().unwrap(),
                &iv.to_tensor().unwrap(),
                uv.as_ref().map(|u| u.to_tensor().unwrap()).as_ref(),
            );
            first_two_ok &= call >= 2 || expected.is_ok();

            let mut bytes = b.out.bytes.clone();
            let got = pool.install(|| {
                let mut ov =
                    TensorViewMut::new(dtype, &out_shape, &b.out.strides, b.out.offset, &mut bytes)
                        .unwrap();
                kernel.run_into(&mut ov, &dv, &iv, uv.as_ref())
            });
            if got.is_err() && bytes != b.out.bytes {
                return Err(format!(
                    "{}: a failed call wrote its output",
                    at("run_into")
                ));
            }
            let written = TensorView::new(dtype, &out_shape, &b.out.strides, b.out.offset, &bytes)
                .and_then(|v| v.to_tensor())
                .unwrap();
            agree(&expected, got.map(|()| written), &at("run_into"))?;

            let got = pool.install(|| kernel.run(&dv, &iv, uv.as_ref()));
            agree(&expected, got, &at("run"))?;

            if let Some(uv) = &uv {
                let mut bytes = b.data.bytes.clone();
                let got = pool.install(|| {
                    let mut data = TensorViewMut::new(
                        dtype,
                        t[0].shape(),
                        &b.data.strides,
                        b.data.offset,
                        &mut bytes,
                    )
                    .unwrap();
                    kernel.scatter_in_place(&mut data, &iv, uv)
                });
                if got.is_err() && bytes != b.data.bytes {
                    return Err(format!("{}: a failed call wrote data", at("in place")));
                }
                let (strides, offset) = (&b.data.strides, b.data.offset);
                let written = TensorView::new(dtype, t[0].shape(), strides, offset, &bytes)
                    .and_then(|v| v.to_tensor())
                    .unwrap();
                agree(&expected, got.map(|()| written), &at("in place"))?;
            }
        }
        // Small calls that succeed are bound by their second call and run on the binding
        // from the third (on one thread; `mean` runs on views).
        let small = [
            &data_t,
            &indices_t,
            &Tensor::zeros(dtype, out_shape.clone()).unwrap(),
        ]
        .iter()
        .all(|t| t.numel() < 4096);
        let mean = case.reduction == scatterjit::Reduction::Mean && updates_t.is_some();
        if *threads == 1 && small && !mean && first_two_ok && kernel.kept_bindings() == 0 {
            return Err(format!("{key}: no call was bound"));
        }
    }
    Ok(())
}

/// Whether a scatter of `case` on contiguous tensors starts from the identity through an
/// index of one position off the axis into at most half as many destination slices: its
/// init reads a copy of the index naming each destination once, made per call, so the
/// call runs on views (`kernel::distinct`, from two slices in tests, see `pools`).
fn inits_distinct(case: &Case) -> bool {
    use scatterjit::Reduction;
    let rank = case.data_shape.len() as i64;
    let axis = if case.axis < 0 {
        case.axis + rank
    } else {
        case.axis
    };
    let Ok(axis) = usize::try_from(axis) else {
        return false;
    };
    let (data, index) = (&case.data_shape, &case.index_shape);
    case.kind == scatterjit::ir::OpKind::ScatterElements
        && !case.use_init_val
        && !matches!(case.reduction, Reduction::None | Reduction::Mean)
        && axis < data.len().min(index.len())
        && (0..index.len()).all(|d| d == axis || index[d] == 1)
        && index[axis] >= 2
        && data[axis] * 2 <= index[axis]
}

/// Six calls of the free function `scatterjit::run` on contiguous tensors of one
/// geometry, new values each time, with the process-wide cache: where the call is small,
/// the first two take the ordinary path (after the second, the calling thread binds and
/// keeps the call), the third to sixth run as the thread's kept call, the fifth with the
/// case's bad index, if any. Every result is the interpreter's, bit for bit, every error
/// its error; on 1 and 3 threads.
fn check_free_repeated(case: &Case) -> Result<(), String> {
    let op = case_op(case);
    for (threads, pool) in [1, 3].iter().zip(pools()) {
        let mut all_ok = true;
        let (_, found_before) = pool.install(scatterjit::kept_calls);
        for call in 0..6u64 {
            let mut values = case.clone();
            values.seed = case.seed.wrapping_add(call.wrapping_mul(0x9E37_79B9));
            if call != 4 {
                values.bad = None;
            }
            let (data, indices, updates) = values.tensors();
            let expected = interp::run(&op, &data, &indices, updates.as_ref());
            all_ok &= call == 4 || expected.is_ok();
            let got = pool.install(|| scatterjit::run(&op, &data, &indices, updates.as_ref()));
            let at = format!(
                "{op:?} on {:?}, call {call} on {threads} threads",
                case.dtype
            );
            agree(&expected, got, &at)?;
            // The same scatter in place through `scatter_`, which finds its kernel kept.
            if let (
                Some(updates),
                &Op::ScatterElements {
                    axis,
                    reduction,
                    use_init_val,
                },
            ) = (&updates, &op)
            {
                // Views hold no strings.
                if case.dtype == DType::String {
                    continue;
                }
                let mut target = data.clone();
                let got = pool.install(|| {
                    let mut view = TensorViewMut::from(&mut target);
                    let (iv, uv) = (TensorView::from(&indices), TensorView::from(updates));
                    scatterjit::scatter_(&mut view, axis, &iv, &uv, reduction, use_init_val)
                });
                let got = got.map(|()| target.clone());
                if got.is_err() && target != data {
                    return Err(format!("{at}: scatter_ failed but changed data"));
                }
                agree(&expected, got, &format!("{at}, scatter_"))?;
            }
        }
        // The last four run as kept calls on one thread where the call binds: small, not
        // `mean` (whose calls run on views), not a Gather (which may run in blocks, also on
        // views), with bytes (strings run on handles of their own).
        let (data, indices, updates) = case.tensors();
        let numel = |t: &Tensor| t.numel();
        let small = [Some(&data), Some(&indices), updates.as_ref()]
            .into_iter()
            .flatten()
            .all(|t| numel(t) < 4096)
            && interp::run(&op, &data, &indices, updates.as_ref())
                .is_ok_and(|out| out.numel() < 4096);
        let mean = case.reduction == scatterjit::Reduction::Mean && updates.is_some();
        let on_views = mean || case.kind == scatterjit::ir::OpKind::Gather || inits_distinct(case);
        // Scatters also run `scatter_` six times, which finds its kernel kept from the
        // third call on, whatever its size.
        let in_place_kept = if updates.is_some() && all_ok && case.dtype != DType::String {
            4
        } else {
            0
        };
        // Counted per thread: only the pool of one runs every call on the thread asked here
        // (the pool of three may run each on another of its threads).
        let (_, found_after) = pool.install(scatterjit::kept_calls);
        let found = found_after.wrapping_sub(found_before);
        let kept_new = if small && !on_views && all_ok && case.dtype != DType::String {
            4
        } else {
            0
        };
        if *threads == 1 && found < kept_new + in_place_kept {
            return Err(format!(
                "{op:?} on {:?}: {found} calls of {} found what their thread kept",
                case.dtype,
                6 * (1 + updates.is_some() as u64),
            ));
        }
    }
    Ok(())
}

/// The view of `s` with `shape`.
fn strided_view<'a>(dtype: DType, shape: &[usize], s: &'a Strided) -> TensorView<'a> {
    TensorView::new(dtype, shape, &s.strides, s.offset, &s.bytes).unwrap()
}

/// An error unless the kernel's result (`got`) is the interpreter's (`expected`): the same
/// values bit for bit, or the same error.
fn agree(
    expected: &Result<Tensor, scatterjit::ir::Error>,
    got: Result<Tensor, Error>,
    at: &str,
) -> Result<(), String> {
    match (expected, &got) {
        (Ok(e), Ok(g))
            if e.shape() == g.shape() && same_values(e.dtype(), e.bytes(), g.bytes()) =>
        {
            Ok(())
        }
        (Err(e), Err(g)) if g.as_invalid() == Some(e) => Ok(()),
        _ => Err(format!("{at}: interpreter {expected:?}, kernel {got:?}")),
    }
}

/// The contiguous tensor of what `s` holds.
fn view(dtype: DType, t: &Tensor, s: &Strided) -> Tensor {
    TensorView::new(dtype, t.shape(), &s.strides, s.offset, &s.bytes)
        .unwrap()
        .to_tensor()
        .unwrap()
}

fn case_op(case: &Case) -> Op {
    use scatterjit::ir::OpKind;
    match case.kind {
        OpKind::ScatterElements => Op::ScatterElements {
            axis: case.axis,
            reduction: case.reduction,
            use_init_val: case.use_init_val,
        },
        OpKind::GatherElements => Op::GatherElements { axis: case.axis },
        OpKind::Gather => Op::Gather { axis: case.axis },
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn prepared_calls_agree_with_run_into(case in case()) {
        check(&case).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn repeated_calls_agree_with_the_interpreter(case in case()) {
        check_repeated(&case).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn repeated_free_calls_agree_with_the_interpreter(case in case()) {
        check_free_repeated(&case).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn prepared_wide_gathers_agree_with_run_into(case in wide_gather_case()) {
        check(&case).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn prepared_rows_reading_lines_ahead_agree_with_run_into(case in picked_lines_case()) {
        check(&case).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn repeated_rows_reading_lines_ahead_agree_with_the_interpreter(
        case in picked_lines_case(),
    ) {
        check_repeated(&case).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn prepared_engine_calls_agree_with_run_into(case in engine_case()) {
        check(&case).map_err(TestCaseError::fail)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    /// Prepared calls whose init reads a copy of the index naming each destination once
    /// run on views, and repeat as the first call ran.
    #[test]
    fn prepared_inits_of_distinct_destinations_agree(case in distinct_init_case()) {
        check(&case).map_err(TestCaseError::fail)?;
        check_repeated(&case).map_err(TestCaseError::fail)?;
    }
}

#[test]
fn buffers_must_fit_the_geometry() {
    let key = KernelKey::gather(DType::F32, DType::I64, 2, 1, 0).unwrap();
    let kernel = KernelCache::global().get(&key).unwrap();
    // data [4, 2] at element offset 1 with row stride 3: needs (1 + 3 * 3 + 1 + 1) * 4 = 48 bytes.
    let call = kernel
        .prepare(
            &Geometry::row_major(&[2, 2]),
            &Geometry::new(&[4, 2], &[3, 1], 1),
            &Geometry::row_major(&[2]),
            None,
        )
        .unwrap();
    let data = vec![0u8; 48];
    let indices: Vec<u8> = [3i64, 0].iter().flat_map(|i| i.to_le_bytes()).collect();
    let mut out = vec![7u8; 16];
    call.run_into(&mut out, &data, &indices, None).unwrap();
    assert_eq!(out, [0u8; 16]);
    let mut out = vec![7u8; 16];
    let short = [
        call.run_into(&mut out, &data[..47], &indices, None),
        call.run_into(&mut out, &data, &indices[..15], None),
        call.run_into(&mut out[..15], &data, &indices, None),
    ];
    for e in short {
        let e = e.unwrap_err();
        assert!(e.to_string().contains("bytes"), "{e}");
    }
    assert_eq!(out, [7u8; 16], "nothing written");
    // The error of a view of the short buffer, word for word.
    let view_error = TensorView::new(DType::F32, &[4, 2], &[3, 1], 1, &data[..47]).unwrap_err();
    let e = call
        .run_into(&mut out, &data[..47], &indices, None)
        .unwrap_err();
    assert_eq!(e, Error::Invalid(view_error));
    // Updates where the call has none, a bad index: errors, nothing written.
    assert!(call
        .run_into(&mut out, &data, &indices, Some(&data))
        .is_err());
    // A call prepared out of place is not run in place, nor the other way round.
    assert!(call.scatter_in_place(&mut out, &indices, &data).is_err());
    let scatter = KernelKey::scatter_elements(
        DType::F32,
        DType::I64,
        1,
        0,
        scatterjit::Reduction::Add,
        true,
    )
    .unwrap();
    let scatter = KernelCache::global().get(&scatter).unwrap();
    let in_place = scatter
        .prepare_in_place(
            &Geometry::row_major(&[4]),
            &Geometry::row_major(&[2]),
            &Geometry::row_major(&[2]),
        )
        .unwrap();
    let mut four = vec![0u8; 16];
    assert!(in_place
        .run_into(&mut four, &data, &indices, Some(&data[..8]))
        .is_err());
    let in_range: Vec<u8> = [3i64, 0].iter().flat_map(|i| i.to_le_bytes()).collect();
    let ones: Vec<u8> = [1.0f32, 1.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    in_place
        .scatter_in_place(&mut four, &in_range, &ones)
        .unwrap();
    assert_eq!(four[12..], 1.0f32.to_le_bytes());
    assert_eq!(four[..4], 1.0f32.to_le_bytes());
    // Gathers have no in-place form.
    assert!(kernel
        .prepare_in_place(
            &Geometry::row_major(&[4, 2]),
            &Geometry::row_major(&[2]),
            &Geometry::row_major(&[2])
        )
        .is_err());
    let bad: Vec<u8> = [4i64, 0].iter().flat_map(|i| i.to_le_bytes()).collect();
    let e = call.run_into(&mut out, &data, &bad, None).unwrap_err();
    assert!(e.to_string().contains("out of bounds"), "{e}");
    assert_eq!(out, [7u8; 16]);
}

#[test]
fn geometry_is_checked_when_prepared() {
    let key = KernelKey::scatter_elements(
        DType::F32,
        DType::I64,
        2,
        0,
        scatterjit::Reduction::Add,
        true,
    )
    .unwrap();
    let kernel = KernelCache::global().get(&key).unwrap();
    let row_major = Geometry::row_major;
    // The output must have the op's shape, updates the indices' shape (or larger).
    assert!(kernel
        .prepare(
            &row_major(&[3, 2]),
            &row_major(&[4, 2]),
            &row_major(&[2, 2]),
            Some(&row_major(&[2, 2]))
        )
        .is_err());
    assert!(kernel
        .prepare(
            &row_major(&[4, 2]),
            &row_major(&[4, 2]),
            &row_major(&[2, 2]),
            None
        )
        .is_err());
    // A writable output whose elements overlap; strides that reach before the buffer.
    assert!(kernel
        .prepare(
            &Geometry::new(&[4, 2], &[1, 1], 0),
            &row_major(&[4, 2]),
            &row_major(&[2, 2]),
            Some(&row_major(&[2, 2]))
        )
        .is_err());
    assert!(kernel
        .prepare(
            &row_major(&[4, 2]),
            &Geometry::new(&[4, 2], &[-2, 1], 0),
            &row_major(&[2, 2]),
            Some(&row_major(&[2, 2]))
        )
        .is_err());
    assert!(kernel
        .prepare(
            &row_major(&[4, 2]),
            &row_major(&[4, 2]),
            &row_major(&[2, 2]),
            Some(&row_major(&[2, 2]))
        )
        .is_ok());
}

/// One prepared call shared by threads, each on its own buffers.
#[test]
fn a_prepared_call_runs_on_many_threads_at_once() {
    fn shared<T: Send + Sync>(_: &T) {}
    let key = KernelKey::gather(DType::I32, DType::I64, 2, 1, 0).unwrap();
    let kernel = KernelCache::global().get(&key).unwrap();
    let call = kernel
        .prepare(
            &Geometry::row_major(&[3, 5]),
            &Geometry::row_major(&[7, 5]),
            &Geometry::row_major(&[3]),
            None,
        )
        .unwrap();
    shared(&call);
    let table: Vec<u8> = (0..35i32).flat_map(|v| v.to_le_bytes()).collect();
    std::thread::scope(|s| {
        for t in 0..4i64 {
            let (call, table) = (&call, &table);
            s.spawn(move || {
                let rows = [t, 6 - t, -1];
                let indices: Vec<u8> = rows.iter().flat_map(|i| i.to_le_bytes()).collect();
                let mut out = vec![0u8; 3 * 5 * 4];
                for _ in 0..1000 {
                    call.run_into(&mut out, table, &indices, None).unwrap();
                }
                let got: Vec<i32> = out
                    .chunks(4)
                    .map(|b| i32::from_le_bytes(b.try_into().unwrap()))
                    .collect();
                let want: Vec<i32> = [t, 6 - t, 6]
                    .iter()
                    .flat_map(|&r| (0..5).map(move |c| (r * 5 + c) as i32))
                    .collect();
                assert_eq!(got, want);
            });
        }
    });
}
