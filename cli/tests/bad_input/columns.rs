//! The op variants a problem runs as (its column), and the updates each passes.

use scatterjit::ir::{DType, Op, OpKind, Reduction, Tensor};
use scatterjit::TensorView;

use super::inputs::filled;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Column {
    /// ONNX ScatterElements (opsets 11-18) with this reduction.
    Onnx(Reduction),
    /// ONNX's legacy Scatter: ScatterElements with reduction none.
    LegacyScatter,
    /// OpenVINO ScatterElementsUpdate-12 with this reduction and `use_init_val`.
    OpenVino(Reduction, bool),
    /// PyTorch `scatter_(dim, index, value)`: a scalar broadcast to the index's shape.
    TorchScalar,
    /// PyTorch `scatter_reduce_(dim, index, src, "sum", include_self=False)`, `src` larger.
    TorchLargerSrc,
    GatherElements,
    Gather,
}

pub(crate) const COLUMNS: [Column; 13] = [
    Column::Onnx(Reduction::None),
    Column::Onnx(Reduction::Add),
    Column::Onnx(Reduction::Mul),
    Column::Onnx(Reduction::Max),
    Column::Onnx(Reduction::Min),
    Column::LegacyScatter,
    Column::OpenVino(Reduction::Mean, true),
    Column::OpenVino(Reduction::Mean, false),
    Column::OpenVino(Reduction::Add, false),
    Column::TorchScalar,
    Column::TorchLargerSrc,
    Column::GatherElements,
    Column::Gather,
];

impl Column {
    /// The column that runs `op`: ONNX's where it has the reduction with `use_init_val`,
    /// else OpenVINO's (which has every reduction, with and without it).
    pub(crate) fn of(op: Op) -> Column {
        match op {
            Op::GatherElements { .. } => Column::GatherElements,
            Op::Gather { .. } => Column::Gather,
            Op::ScatterElements {
                reduction: Reduction::Mean,
                use_init_val,
                ..
            } => Column::OpenVino(Reduction::Mean, use_init_val),
            Op::ScatterElements {
                reduction,
                use_init_val: true,
                ..
            } => Column::Onnx(reduction),
            Op::ScatterElements { reduction, .. } => Column::OpenVino(reduction, false),
        }
    }

    pub(crate) fn name(self) -> String {
        match self {
            Column::Onnx(r) => format!("onnx scatter_elements {r}"),
            Column::LegacyScatter => "onnx scatter (legacy)".into(),
            Column::OpenVino(r, init) => format!(
                "openvino scatter_elements_update {}{}",
                openvino_name(r),
                if init { "" } else { " no-init" }
            ),
            Column::TorchScalar => "torch scatter_ scalar".into(),
            Column::TorchLargerSrc => "torch scatter_reduce_ sum larger src".into(),
            Column::GatherElements => "gather_elements".into(),
            Column::Gather => "gather".into(),
        }
    }

    /// The reduction and `use_init_val` of a scatter column.
    pub(crate) fn reduction(self) -> Option<(Reduction, bool)> {
        match self {
            Column::Onnx(r) => Some((r, true)),
            Column::LegacyScatter | Column::TorchScalar => Some((Reduction::None, true)),
            Column::OpenVino(r, init) => Some((r, init)),
            Column::TorchLargerSrc => Some((Reduction::Add, false)),
            Column::GatherElements | Column::Gather => None,
        }
    }

    pub(crate) fn op(self, axis: i64) -> Op {
        match (self, self.reduction()) {
            (Column::GatherElements, _) => Op::GatherElements { axis },
            (Column::Gather, _) => Op::Gather { axis },
            (_, Some((reduction, use_init_val))) => Op::ScatterElements {
                axis,
                reduction,
                use_init_val,
            },
            (_, None) => unreachable!("every other column scatters"),
        }
    }

    pub(crate) fn kind(self) -> OpKind {
        self.op(0).kind()
    }

    pub(crate) fn scatters(self) -> bool {
        self.reduction().is_some()
    }

    /// The command line for this column, without files (`None`: it has no CLI form).
    pub(crate) fn cli(self, axis: i64) -> Option<Vec<String>> {
        let (command, reduction) = match self {
            Column::TorchScalar => return None,
            Column::GatherElements => ("gather-elements", None),
            Column::Gather => ("gather", None),
            Column::LegacyScatter => ("scatter", None),
            Column::Onnx(r) => ("scatter-elements", Some((r.to_string(), true))),
            Column::OpenVino(r, init) => ("scatter-elements", Some((openvino_name(r), init))),
            Column::TorchLargerSrc => ("scatter-elements", Some(("sum".to_string(), false))),
        };
        let mut args = vec!["run".into(), command.into(), format!("--axis={axis}")];
        if let Some((name, init)) = reduction {
            args.extend([
                "--reduction".into(),
                name,
                "--use-init-val".into(),
                init.to_string(),
            ]);
        }
        Some(args)
    }

    /// The `src` this column passes with indices of `shape`.
    pub(crate) fn src(self, dtype: DType, shape: &[usize]) -> Option<Src> {
        match self {
            Column::GatherElements | Column::Gather => None,
            Column::TorchScalar => Some(Src::scalar(dtype, shape)),
            Column::TorchLargerSrc => {
                let larger: Vec<usize> = shape.iter().map(|d| d + 2).collect();
                Some(Src::Tensor(filled(dtype, &larger, 7)))
            }
            _ => Some(Src::Tensor(filled(dtype, shape, 7))),
        }
    }
}

/// OpenVINO's spelling of a reduction.
fn openvino_name(r: Reduction) -> String {
    match r {
        Reduction::Add => "sum".into(),
        Reduction::Mul => "prod".into(),
        r => r.to_string(),
    }
}

/// Updates: an owned tensor, or one element broadcast to a shape (all strides zero).
#[derive(Clone, Debug)]
pub(crate) enum Src {
    Tensor(Tensor),
    Scalar {
        dtype: DType,
        shape: Vec<usize>,
        element: Vec<u8>,
    },
}

impl Src {
    pub(crate) fn scalar(dtype: DType, shape: &[usize]) -> Src {
        Src::Scalar {
            dtype,
            shape: shape.to_vec(),
            element: filled(dtype, &[], 7).into_bytes(),
        }
    }

    pub(crate) fn view(&self) -> TensorView<'_> {
        match self {
            Src::Tensor(t) => t.into(),
            Src::Scalar {
                dtype,
                shape,
                element,
            } => TensorView::new(*dtype, shape, &vec![0; shape.len()], 0, element)
                .expect("a broadcast view of one element"),
        }
    }

    pub(crate) fn tensor(&self) -> Option<&Tensor> {
        match self {
            Src::Tensor(t) => Some(t),
            Src::Scalar { .. } => None,
        }
    }
}
