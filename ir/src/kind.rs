//! The names of things: the op families, the tensors an op takes, the largest rank.

use std::fmt;

/// The largest rank of any one tensor. Gather's output may reach `2 * MAX_RANK - 1`.
pub const MAX_RANK: usize = 8;

/// The op families, without attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    /// ONNX ScatterElements / Scatter, OpenVINO ScatterElementsUpdate, PyTorch `scatter_`.
    ScatterElements,
    /// ONNX GatherElements, PyTorch `gather`.
    GatherElements,
    /// ONNX Gather, PyTorch `index_select`.
    Gather,
}

impl OpKind {
    /// The name used in keys and messages (`scatter_elements`, `gather_elements`, `gather`).
    pub const fn name(self) -> &'static str {
        match self {
            OpKind::ScatterElements => "scatter_elements",
            OpKind::GatherElements => "gather_elements",
            OpKind::Gather => "gather",
        }
    }

    /// Every op kind.
    pub const ALL: &'static [OpKind] = &[
        OpKind::ScatterElements,
        OpKind::GatherElements,
        OpKind::Gather,
    ];
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The role a tensor plays in an op; names tensors in messages. The C ABI's `SjArgs` has
/// one field per role (the output's is `out`), and the loop nests'
/// [`Operand`](crate::Operand) names the same tensors (the output is `Operand::Out`)
/// besides `mean`'s scratch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TensorRole {
    /// The tensor read from (gather) or copied and updated (scatter).
    Data,
    /// The integer positions along the axis.
    Indices,
    /// The values scattered.
    Updates,
    /// The result.
    Output,
}

impl fmt::Display for TensorRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TensorRole::Data => "data",
            TensorRole::Indices => "indices",
            TensorRole::Updates => "updates",
            TensorRole::Output => "output",
        })
    }
}
