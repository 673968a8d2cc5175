//! String tensors through the compiled kernels, which only move bytes.
//!
//! Each string gets an integer handle: data element `i` is handle `i`, updates element `j`
//! is handle `data.numel() + j`. The ordinary kernel of the same op, axis, ranks and index
//! dtype runs on the handle tensors, and the output's handles are turned back into strings.
//! So strings get the numeric kernels' bounds checks, negative indices, error positions,
//! duplicate order (the last update wins) and parallel split, with no code of their own.
//!
//! Handles are u32 while every element has one that fits, u64 beyond: the narrower type
//! halves the bytes the kernel moves, and two handle types keep the number of compiled
//! kernels per string key at two at most.

use scatterjit_ir::{Element, Op, Tensor};

use crate::error::Result;

/// The fewest strings a chunk of the map back holds: outputs shorter than twice this are
/// mapped back in one chunk, on the calling thread.
const PARALLEL_MIN: usize = 1 << 12;

/// Runs `op` on string tensors (validated by the caller) through the kernel of its handles.
pub(crate) fn run(
    op: &Op,
    data: &Tensor,
    indices: &Tensor,
    updates: Option<&Tensor>,
) -> Result<Tensor> {
    let data_strings = data.strings()?;
    let update_strings = match updates {
        Some(u) => u.strings()?,
        None => &[],
    };
    // Both lists are in memory, so their total length fits a usize.
    let total = data_strings.len() + update_strings.len();
    let strings = Strings {
        data: data_strings,
        updates: update_strings,
    };
    if u32::try_from(total).is_ok() {
        via_handles::<u32>(op, data, indices, updates, &strings)
    } else {
        via_handles::<u64>(op, data, indices, updates, &strings)
    }
}

/// The strings a handle can name: data's, then updates'.
struct Strings<'a> {
    data: &'a [String],
    updates: &'a [String],
}

impl Strings<'_> {
    fn get(&self, handle: u64) -> &String {
        // Handles come from `handles` below and the kernels only move them.
        let h = handle as usize;
        match self.data.get(h) {
            Some(s) => s,
            None => &self.updates[h - self.data.len()],
        }
    }
}

/// The handle tensor of `shape` whose elements are `first, first + 1, ...` (all of which
/// fit `H`: see [`run`]).
fn handles<H: Element + TryFrom<usize>>(shape: &[usize], first: usize) -> Result<Tensor> {
    let values: Vec<H> = (first..first + scatterjit_ir::checked_numel(shape)?)
        .filter_map(|h| H::try_from(h).ok())
        .collect();
    Ok(Tensor::from_slice(shape, &values)?)
}

fn via_handles<H: Element + TryFrom<usize> + Into<u64>>(
    op: &Op,
    data: &Tensor,
    indices: &Tensor,
    updates: Option<&Tensor>,
    strings: &Strings<'_>,
) -> Result<Tensor> {
    let data_handles = handles::<H>(data.shape(), 0)?;
    let update_handles = updates
        .map(|u| handles::<H>(u.shape(), strings.data.len()))
        .transpose()?;
    let out = crate::api::run(op, &data_handles, indices, update_handles.as_ref())?;
    let handles = out.to_vec::<H>()?;
    let value = |&h: &H| strings.get(h.into()).clone();
    // Chunks of at least PARALLEL_MIN strings, as many as a host step takes
    // (`threads::stream_chunks`), each filling its own part of the output.
    let threads = crate::threads::available();
    let most = (handles.len() / PARALLEL_MIN).max(1);
    let bytes = std::mem::size_of_val(handles.as_slice());
    let chunk = handles
        .len()
        .div_ceil(crate::threads::stream_chunks(bytes, most))
        .max(1);
    let mut values = vec![String::new(); handles.len()];
    let pieces: Vec<_> = values
        .chunks_mut(chunk)
        .zip(handles.chunks(chunk))
        .collect();
    let work = i64::try_from(handles.len()).unwrap_or(i64::MAX);
    crate::threads::each_item(
        pieces,
        crate::threads::caller_helps(work, threads),
        |_, (out, handles)| out.iter_mut().zip(handles).for_each(|(o, h)| *o = value(h)),
    );
    Ok(Tensor::from_strings(out.shape(), values)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use scatterjit_ir::{interp, DType, Error as IrError, OpKind, Reduction};

    use crate::error::Error;
    use crate::tensor::{TensorView, TensorViewMut};
    use crate::KernelCache;

    fn text(shape: &[usize], values: &[&str]) -> Tensor {
        Tensor::from_strings(shape, values.iter().copied()).unwrap()
    }

    #[test]
    fn every_handle_width_gives_the_interpreters_result() {
        let data = text(&[2, 3], &["a", "", "ü", "日本", "🦀", "x y"]);
        let indices = Tensor::from_slice(&[2, 2], &[2i16, -3, 0, 2]).unwrap();
        let updates = text(&[2, 3], &["p", "q", "r", "s", "t", "u"]);
        let op = Op::ScatterElements {
            axis: 1,
            reduction: Reduction::None,
            use_init_val: true,
        };
        let want = interp::run(&op, &data, &indices, Some(&updates)).unwrap();
        let strings = Strings {
            data: data.strings().unwrap(),
            updates: updates.strings().unwrap(),
        };
        let u32s = via_handles::<u32>(&op, &data, &indices, Some(&updates), &strings).unwrap();
        let u64s = via_handles::<u64>(&op, &data, &indices, Some(&updates), &strings).unwrap();
        assert_eq!(u32s, want);
        assert_eq!(u64s, want);
        assert_eq!(
            want.strings().unwrap(),
            ["q", "", "p", "s", "🦀", "t"],
            "the interpreter itself"
        );
    }

    #[test]
    fn long_outputs_map_back_alike_on_any_pool() {
        // Several chunks of PARALLEL_MIN strings, a short last one.
        let n = 3 * PARALLEL_MIN + 5;
        let words: Vec<String> = (0..n).map(|i| format!("w{i}")).collect();
        let data = Tensor::from_strings(&[n], words.iter().map(String::as_str)).unwrap();
        let picks: Vec<i64> = (0..n as i64).map(|i| (i * 7919) % n as i64 - 3).collect();
        let indices = Tensor::from_slice(&[n], &picks).unwrap();
        let op = Op::Gather { axis: 0 };
        let want = interp::run(&op, &data, &indices, None).unwrap();
        let run = || run(&op, &data, &indices, None).unwrap();
        assert_eq!(run(), want);
        assert_eq!(crate::serial(run), want);
        let three = crate::Pool::new(3).unwrap();
        assert_eq!(three.run(run), want);
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build();
        assert_eq!(pool.unwrap().install(run), want);
    }

    #[test]
    fn views_of_strings_reach_no_kernel() {
        let mut data = text(&[3], &["a", "b", "c"]);
        let before = data.clone();
        let indices = Tensor::from_slice(&[1], &[0i64]).unwrap();
        let updates = text(&[1], &["z"]);
        let e = crate::scatter_(
            &mut TensorViewMut::from(&mut data),
            0,
            &(&indices).into(),
            &(&updates).into(),
            Reduction::None,
            true,
        )
        .unwrap_err();
        assert_eq!(
            e,
            Error::Invalid(IrError::UnsupportedDType {
                op: OpKind::ScatterElements,
                dtype: DType::String,
            })
        );
        assert_eq!(data, before);
        // A numeric kernel refuses string operands: their key is not its key.
        let key = scatterjit_ir::KernelKey::gather(DType::U32, DType::I64, 1, 1, 0).unwrap();
        let kernel = KernelCache::global().get(&key).unwrap();
        let e = kernel
            .run(&TensorView::from(&data), &(&indices).into(), None)
            .unwrap_err();
        assert!(
            matches!(e, Error::Invalid(IrError::KernelMismatch { .. })),
            "{e}"
        );
    }
}
