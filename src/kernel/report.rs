//! Turning a pass's bad-index exit into the error that names the first bad index, as the
//! reference interpreter does.

use scatterjit_ir::{Coord, Error as IrError, PassKind};

use super::Kernel;
use crate::error::Error;
use crate::tensor::TensorView;

/// Why a pass stopped early.
pub(super) enum Stop {
    /// At a bad index; the domain position (loop counters by domain dim) at that point.
    BadIndex(Vec<usize>),
    /// The pass could not be compiled.
    Failed(Error),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Self {
        Stop::Failed(e)
    }
}

impl Kernel {
    /// The error for a bad index met by `pass` at loop counters `bad`. Passes other than
    /// the check may run in another loop order, so the check pass (row-major over indices)
    /// names the first bad index, as the reference interpreter does.
    pub(super) fn bad_index(
        &self,
        pass: PassKind,
        stop: Stop,
        data_shape: &[usize],
        indices: &TensorView<'_>,
    ) -> Error {
        let bad = match stop {
            Stop::Failed(e) => return e,
            Stop::BadIndex(bad) => bad,
        };
        if pass != PassKind::Check {
            if let Err(first) = self.check_indices(data_shape, indices) {
                return first;
            }
        }
        let nest = self
            .plan
            .pass(pass)
            .expect("the pass that failed is planned");
        let index = nest
            .index
            .as_ref()
            .expect("only passes that read indices fail");
        let position: Vec<usize> = index
            .coords
            .iter()
            .map(|c| match c {
                Coord::Loop(d) => bad[*d],
                Coord::Index => unreachable!("indices are not read through an index"),
            })
            .collect();
        self.index_error(indices, position, data_shape[self.plan.key.axis()])
    }

    /// The error naming the index at `position` of `indices`, out of bounds for `size`.
    pub(super) fn index_error(
        &self,
        indices: &TensorView<'_>,
        position: Vec<usize>,
        size: usize,
    ) -> Error {
        let key = self.plan.key;
        Error::Invalid(IrError::IndexOutOfBounds {
            op: key.kind(),
            index: read_index(indices, &position),
            position,
            axis: key.axis(),
            size,
        })
    }
}

/// Loop counters (in loop `order`) as a position by domain dim.
pub(super) fn domain_position(mut counters: Vec<usize>, order: &[usize]) -> Vec<usize> {
    let mut position = vec![0usize; order.len()];
    for (n, &d) in order.iter().enumerate() {
        position[d] = std::mem::take(&mut counters[n]);
    }
    position
}

/// The index stored at `position` of `indices`, widened to i128.
fn read_index(indices: &TensorView<'_>, position: &[usize]) -> i128 {
    let offset: isize = position
        .iter()
        .zip(indices.strides())
        .map(|(&p, &s)| p as isize * s)
        .sum();
    let bytes = indices.element_bytes(offset);
    let mut raw = [0u8; 8];
    raw[..bytes.len()].copy_from_slice(bytes);
    let unused_bits = 64 - 8 * bytes.len() as u32;
    if indices.dtype().is_signed_integer() {
        // Shift the sign bit to the top and back to sign-extend.
        ((i64::from_le_bytes(raw) << unused_bits) >> unused_bits) as i128
    } else {
        u64::from_le_bytes(raw) as i128
    }
}
