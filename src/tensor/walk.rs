//! Walking the positions of a strided shape.

/// The element offset under `strides` of the `flat`th position of `shape` in row-major
/// order (`flat` below the product of `shape`).
pub(crate) fn offset_of(mut flat: usize, shape: &[usize], strides: &[isize]) -> isize {
    let mut at = 0isize;
    for (&d, &stride) in shape.iter().zip(strides).rev() {
        at += (flat % d) as isize * stride;
        flat /= d;
    }
    at
}

/// Calls `f` with the element offset of every position of `shape`, in row-major order.
pub(crate) fn for_each_offset(shape: &[usize], strides: &[isize], mut f: impl FnMut(isize)) {
    if shape.contains(&0) {
        return;
    }
    let mut pos = vec![0usize; shape.len()];
    let mut off = 0isize;
    // Wrapping steps: a dim's last step may leave the range (a size-1 dim may have any
    // stride) before it is undone, but every offset passed to `f` is exact.
    loop {
        f(off);
        let mut d = shape.len();
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            pos[d] += 1;
            off = off.wrapping_add(strides[d]);
            if pos[d] < shape[d] {
                break;
            }
            off = off.wrapping_sub(strides[d].wrapping_mul(shape[d] as isize));
            pos[d] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_row_major() {
        let mut seen = Vec::new();
        for_each_offset(&[2, 2], &[1, 10], |o| seen.push(o));
        assert_eq!(seen, [0, 10, 1, 11]);
        let mut n = 0;
        for_each_offset(&[], &[], |_| n += 1);
        assert_eq!(n, 1);
        // Found by fuzzing: a size-1 dim's stride, stepped past and back, overflowed.
        let mut seen = Vec::new();
        for_each_offset(&[2, 1], &[1, isize::MAX], |o| seen.push(o));
        assert_eq!(seen, [0, 1]);
    }

    #[test]
    fn offset_of_a_position_is_the_walks() {
        let (shape, strides) = ([3, 1, 4], [-5, 99, 2]);
        let mut seen = Vec::new();
        for_each_offset(&shape, &strides, |o| seen.push(o));
        let direct: Vec<isize> = (0..12).map(|f| offset_of(f, &shape, &strides)).collect();
        assert_eq!(direct, seen);
        assert_eq!(offset_of(0, &[], &[]), 0);
    }
}
