//! The `scatterjit` command-line tool: runs one op on `.npy` files, prints how a kernel is
//! compiled, runs the built-in examples, or compiles kernels ahead of time.
//!
//! Conventions: on success `run` prints nothing. Any invalid input (unreadable or malformed
//! file, bad flag value, dtype or shape mismatch, out-of-bounds index, ...) prints exactly one
//! line on stderr, starting with `error: `, and exits with 2 for a usage error (flags and
//! arguments) or 1 otherwise. The result is computed in memory and written atomically, so
//! the output file is neither created nor modified when anything fails. An internal bug
//! (a panic) is also reported on one line, unless `RUST_BACKTRACE` is set.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, Result};
use clap::error::ErrorKind;
use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};
use scatterjit::{DType, KernelCache, KernelKey, Op, Reduction, Tensor};
use scatterjit_cli::{atomic, npy};

/// Compiles scatter/gather kernels at run time with Cranelift and runs them on .npy files.
#[derive(Parser)]
#[command(name = "scatterjit", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs one op on .npy files and writes the result as .npy (with data's dtype descr).
    Run {
        #[command(flatten)]
        limits: LimitArgs,
        #[command(subcommand)]
        op: RunOp,
    },
    /// Prints a kernel's op IR, its CLIF (as built and optimized) and its machine code.
    Explain(ExplainArgs),
    /// Runs the ONNX examples through the JIT, checks the results and shows compile times.
    Demo,
    /// Times the standard workload suite: JIT at 1 and N threads, an interpreted kernel and
    /// a copy baseline, side by side (results are checked first).
    Bench(BenchArgs),
    /// Compiles kernels ahead of time into an object file for this host or another target and
    /// a C header that declares one entry per key (string keys are not available ahead of
    /// time).
    Aot(AotArgs),
}

#[derive(Args)]
struct AotArgs {
    /// Kernel keys, as `explain` and the library print them
    /// (e.g. scatter_elements.f32.i64.r2.a1.add, gather.f32.i64.r2.q1.a0).
    #[arg(value_name = "KEY")]
    keys: Vec<String>,
    /// Also compile the keys in this file: one per line; blank lines and `#` comments are
    /// skipped.
    #[arg(long, value_name = "FILE")]
    manifest: Option<PathBuf>,
    /// The object file to write.
    #[arg(short = 'o', long = "output", value_name = "OUT.o")]
    output: PathBuf,
    /// The C header to write [default: OUT with the extension .h].
    #[arg(long, value_name = "OUT.h")]
    header: Option<PathBuf>,
    /// The machine the object is for: x86_64-unknown-linux-gnu, aarch64-unknown-linux-gnu
    /// or riscv64gc-unknown-linux-gnu [default: this host, with every feature its CPU has].
    #[arg(long, value_name = "TRIPLE")]
    target: Option<String>,
    /// CPU features of the target beyond its baseline, comma-separated, by Cranelift's
    /// names: features (avx2, lse, v) or levels (x86-64-v3, haswell).
    #[arg(
        long,
        value_name = "FEATURES",
        value_delimiter = ',',
        requires = "target"
    )]
    cpu_features: Vec<String>,
}

#[derive(Args)]
struct BenchArgs {
    /// Reduced sizes and fewer rounds: seconds instead of minutes.
    #[arg(long)]
    quick: bool,
    /// Run only this workload (repeatable).
    #[arg(long, value_name = "NAME")]
    only: Vec<String>,
    /// Threads of the parallel JIT column [default: all the machine has].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,
    /// Print JSON (every sample) instead of the table.
    #[arg(long)]
    json: bool,
    /// Also draw a bar chart of GB/s to this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
}

/// Caps on what `run` allocates (see `scatterjit::Limits`).
#[derive(Args)]
struct LimitArgs {
    /// Refuse an output larger than this; a number of bytes, optionally with a K, M, G or T
    /// suffix (powers of 1024) [default: 16G].
    #[arg(long, global = true, value_name = "BYTES", value_parser = parse_bytes)]
    max_output_bytes: Option<u64>,
    /// Refuse more scratch memory (mean's sums and counts) than this [default: 64G].
    #[arg(long, global = true, value_name = "BYTES", value_parser = parse_bytes)]
    max_scratch_bytes: Option<u64>,
}

/// `4096`, `64K`, `16G`, ...: bytes with an optional binary suffix.
fn parse_bytes(text: &str) -> std::result::Result<u64, String> {
    let (digits, shift) = match text.char_indices().last() {
        Some((at, 'K' | 'k')) => (&text[..at], 10),
        Some((at, 'M' | 'm')) => (&text[..at], 20),
        Some((at, 'G' | 'g')) => (&text[..at], 30),
        Some((at, 'T' | 't')) => (&text[..at], 40),
        _ => (text, 0),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("expected a number of bytes (e.g. 4096, 64K, 16G), got {text:?}"))?;
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("{text} bytes do not fit in 64 bits"))
}

#[derive(Subcommand)]
enum RunOp {
    /// ONNX ScatterElements (and legacy Scatter), OpenVINO ScatterElementsUpdate, PyTorch scatter_.
    #[command(visible_alias = "scatter")]
    ScatterElements {
        #[command(flatten)]
        axis: AxisArg,
        #[command(flatten)]
        reduce: ReduceArgs,
        /// The tensor to copy and update.
        #[arg(value_name = "DATA.npy")]
        data: PathBuf,
        /// Integer positions along the axis (same rank as data).
        #[arg(value_name = "INDICES.npy")]
        indices: PathBuf,
        /// The values to scatter (data's dtype, same rank as data).
        #[arg(value_name = "UPDATES.npy")]
        updates: PathBuf,
        #[command(flatten)]
        out: OutArg,
    },
    /// ONNX GatherElements, PyTorch gather.
    GatherElements {
        #[command(flatten)]
        axis: AxisArg,
        /// The tensor to read from.
        #[arg(value_name = "DATA.npy")]
        data: PathBuf,
        /// Integer positions along the axis (same rank as data).
        #[arg(value_name = "INDICES.npy")]
        indices: PathBuf,
        #[command(flatten)]
        out: OutArg,
    },
    /// ONNX Gather, PyTorch index_select.
    Gather {
        #[command(flatten)]
        axis: AxisArg,
        /// The tensor to read from.
        #[arg(value_name = "DATA.npy")]
        data: PathBuf,
        /// Integer positions along the axis (any rank).
        #[arg(value_name = "INDICES.npy")]
        indices: PathBuf,
        #[command(flatten)]
        out: OutArg,
    },
}

#[derive(Args)]
struct AxisArg {
    /// Axis along which the indices point; negative counts from the back.
    #[arg(
        long,
        default_value_t = 0,
        allow_negative_numbers = true,
        value_name = "A"
    )]
    axis: i64,
}

#[derive(Args)]
struct ReduceArgs {
    /// How updates combine: none, add, mul, max, min, mean (or sum, prod, multiply, amax, amin).
    #[arg(long, default_value = "none", value_name = "R")]
    reduction: Reduction,
    /// Whether updated elements start from data (true) or the reduction's identity (false).
    #[arg(long, default_value_t = true, action = ArgAction::Set, value_name = "true|false")]
    use_init_val: bool,
}

#[derive(Args)]
struct OutArg {
    /// Where to write the result (replaced atomically; untouched on any error).
    #[arg(short = 'o', long = "output", value_name = "OUT.npy")]
    output: PathBuf,
}

#[derive(Args)]
struct ExplainArgs {
    /// The op.
    op: OpName,
    /// Element type of data (f16, bf16, f32, f64, i8..i64, u8..u64, bool, c64, c128).
    #[arg(long, value_name = "T")]
    dtype: DType,
    /// Element type of indices (an integer type).
    #[arg(long, value_name = "I")]
    index_dtype: DType,
    /// Rank of data.
    #[arg(long, value_name = "R")]
    rank: usize,
    /// Rank of indices (gather only; default 1).
    #[arg(long, value_name = "Q")]
    index_rank: Option<usize>,
    /// Axis along which the indices point; negative counts from the back.
    #[arg(
        long,
        default_value_t = 0,
        allow_negative_numbers = true,
        value_name = "A"
    )]
    axis: i64,
    /// Reduction (scatter-elements only; default none).
    #[arg(long, value_name = "R")]
    reduction: Option<Reduction>,
    /// Whether updated elements start from data (scatter-elements only; default true).
    #[arg(long, action = ArgAction::Set, value_name = "true|false")]
    use_init_val: Option<bool>,
}

/// Op names as the command line spells them.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum OpName {
    /// ScatterElements (alias: scatter).
    #[value(alias = "scatter", alias = "scatter_elements")]
    ScatterElements,
    /// GatherElements.
    #[value(alias = "gather_elements")]
    GatherElements,
    /// Gather.
    Gather,
}

/// A mistake in how the tool was called (exit status 2), as opposed to bad input data.
#[derive(Debug)]
struct UsageError(String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

fn main() -> ExitCode {
    install_panic_hook();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return clap_error(e),
    };
    let result = match cli.command {
        Command::Run { limits, op } => run(limits, op).map(|()| ExitCode::SUCCESS),
        Command::Explain(args) => explain(args).map(|()| ExitCode::SUCCESS),
        Command::Demo => demo(),
        Command::Bench(args) => bench(args).map(|()| ExitCode::SUCCESS),
        Command::Aot(args) => aot(args).map(|()| ExitCode::SUCCESS),
    };
    result.unwrap_or_else(|e| {
        report(&e.to_string());
        if e.is::<UsageError>() {
            ExitCode::from(2)
        } else {
            ExitCode::FAILURE
        }
    })
}

/// Help and version go to stdout as clap formats them; real parse errors become one line.
fn clap_error(e: clap::Error) -> ExitCode {
    if !e.use_stderr() {
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    report(&one_line_clap_message(e.kind(), &e.render().to_string()));
    ExitCode::from(2)
}

/// Condenses clap's multi-line error text: the message with the lines that complete it
/// (missing arguments, possible values) and its tips, without the usage and help footer.
fn one_line_clap_message(kind: ErrorKind, text: &str) -> String {
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    if kind == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        // clap would print the whole help; say what is missing instead.
        let usage = lines.iter().find_map(|l| l.strip_prefix("Usage: "));
        return format!(
            "a command is missing; usage: {}",
            usage.unwrap_or("scatterjit <COMMAND>")
        );
    }
    let mut paragraphs = lines.split(|l| l.is_empty()).filter(|p| !p.is_empty());
    let Some(first) = paragraphs.next() else {
        return "invalid arguments".to_string();
    };
    let mut message = first[0]
        .strip_prefix("error: ")
        .unwrap_or(first[0])
        .to_string();
    if first.len() > 1 {
        message.push(' ');
        message.push_str(&first[1..].join(", "));
    }
    for p in paragraphs {
        if p[0].starts_with("tip:") {
            message = format!("{message} ({})", p.join(" "));
        }
    }
    message
}

/// Prints `error: <message>` as exactly one line on stderr.
fn report(message: &str) {
    let one_line: String = message
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    eprintln!("error: {}", one_line.trim_end());
}

/// Reports panics (always bugs) on one line too; `RUST_BACKTRACE` restores the full report.
fn install_panic_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if std::env::var_os("RUST_BACKTRACE").is_some() {
            return default(info);
        }
        let payload = info.payload();
        let message = payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("panic");
        let location = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        report(&format!(
            "internal error: {message}{location} (a bug in scatterjit; set RUST_BACKTRACE=1 for details)"
        ));
    }));
}

// ---------------------------------------------------------------------------------------------
// run

fn run(limit_args: LimitArgs, op: RunOp) -> Result<()> {
    let mut limits = scatterjit::limits();
    if let Some(bytes) = limit_args.max_output_bytes {
        limits.max_output_bytes = bytes;
    }
    if let Some(bytes) = limit_args.max_scratch_bytes {
        limits.max_scratch_bytes = bytes;
    }
    scatterjit::set_limits(limits);
    match op {
        RunOp::ScatterElements {
            axis,
            reduce,
            data,
            indices,
            updates,
            out,
        } => {
            let op = Op::ScatterElements {
                axis: axis.axis,
                reduction: reduce.reduction,
                use_init_val: reduce.use_init_val,
            };
            run_files(op, &data, &indices, Some(&updates), &out.output)
        }
        RunOp::GatherElements {
            axis,
            data,
            indices,
            out,
        } => run_files(
            Op::GatherElements { axis: axis.axis },
            &data,
            &indices,
            None,
            &out.output,
        ),
        RunOp::Gather {
            axis,
            data,
            indices,
            out,
        } => run_files(
            Op::Gather { axis: axis.axis },
            &data,
            &indices,
            None,
            &out.output,
        ),
    }
}

/// Reads the inputs, computes in memory, then writes `output` atomically with data's descr
/// (see [`output_descr`]).
fn run_files(
    op: Op,
    data: &Path,
    indices: &Path,
    updates: Option<&Path>,
    output: &Path,
) -> Result<()> {
    let data = npy::read(data)?;
    let indices = npy::read(indices)?;
    let updates = updates.map(npy::read).transpose()?;
    let result = scatterjit::run(
        &op,
        &data.tensor,
        &indices.tensor,
        updates.as_ref().map(|u| &u.tensor),
    )
    .map_err(|e| match e {
        scatterjit::Error::LimitExceeded { buffer, .. } => {
            anyhow!("{e} (raise it with --max-{buffer}-bytes)")
        }
        e => e.into(),
    })?;
    npy::write(output, &result, &output_descr(&op, &data.descr, &result))?;
    Ok(())
}

/// The descr `result` is written with: data's, except that a gathered string array
/// (unicode, `<U{n}`) is as wide as the longest string it holds, the width numpy gives those
/// values (never below 1; data's when nothing was gathered). A scattered one keeps data's
/// width (widened where an update is longer, see `npy::write`).
fn output_descr(op: &Op, data_descr: &str, result: &Tensor) -> String {
    let gathered = matches!(op, Op::Gather { .. } | Op::GatherElements { .. });
    if gathered && result.dtype() == DType::String && result.numel() > 0 {
        // Without digits the width is the longest string's (`npy::write`).
        return data_descr
            .trim_end_matches(|c: char| c.is_ascii_digit())
            .to_string();
    }
    data_descr.to_string()
}

// ---------------------------------------------------------------------------------------------
// explain

fn explain(args: ExplainArgs) -> Result<()> {
    let scatter = args.op == OpName::ScatterElements;
    if !scatter && args.reduction.is_some() {
        return Err(UsageError("--reduction applies to scatter-elements only".into()).into());
    }
    if !scatter && args.use_init_val.is_some() {
        return Err(UsageError("--use-init-val applies to scatter-elements only".into()).into());
    }
    if args.op != OpName::Gather && args.index_rank.is_some() {
        return Err(UsageError(
            "--index-rank applies to gather only (the other ops take indices of data's rank)"
                .into(),
        )
        .into());
    }
    let key = match args.op {
        OpName::ScatterElements => KernelKey::scatter_elements(
            args.dtype,
            args.index_dtype,
            args.rank,
            args.axis,
            args.reduction.unwrap_or(Reduction::None),
            args.use_init_val.unwrap_or(true),
        )?,
        OpName::GatherElements => {
            KernelKey::gather_elements(args.dtype, args.index_dtype, args.rank, args.axis)?
        }
        OpName::Gather => KernelKey::gather(
            args.dtype,
            args.index_dtype,
            args.rank,
            args.index_rank.unwrap_or(1),
            args.axis,
        )?,
    };
    let text = scatterjit::explain(&key)?;
    print_stdout(&text)
}

/// Writes to stdout; a closed pipe (`scatterjit explain ... | head`) is not an error.
fn print_stdout(text: &str) -> Result<()> {
    let mut out = io::stdout().lock();
    let result = out.write_all(text.as_bytes()).and_then(|()| out.flush());
    match result {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => {
            Err(anyhow!("cannot write to stdout: {e}"))
        }
        _ => Ok(()),
    }
}

// ---------------------------------------------------------------------------------------------
// aot

fn aot(args: AotArgs) -> Result<()> {
    let mut keys = Vec::new();
    for text in &args.keys {
        keys.push(text.parse::<KernelKey>()?);
    }
    if let Some(manifest) = &args.manifest {
        let text = std::fs::read_to_string(manifest)
            .map_err(|e| anyhow!("cannot read {}: {e}", manifest.display()))?;
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let key = line
                .parse::<KernelKey>()
                .map_err(|e| anyhow!("{}:{}: {e}", manifest.display(), n + 1))?;
            keys.push(key);
        }
    }
    if keys.is_empty() {
        return Err(
            UsageError("no kernel keys given (as arguments or with --manifest)".into()).into(),
        );
    }
    let header = args
        .header
        .unwrap_or_else(|| args.output.with_extension("h"));
    if header == args.output {
        return Err(UsageError(format!(
            "the header and the object would both be {}",
            header.display()
        ))
        .into());
    }
    let target = match &args.target {
        Some(triple) => {
            let features: Vec<&str> = args.cpu_features.iter().map(String::as_str).collect();
            scatterjit::aot::Target::new(triple, &features)?
        }
        None => scatterjit::aot::Target::host(),
    };
    let artifacts = scatterjit::aot::compile_for(&keys, &target)?;
    for (path, bytes) in [
        (&args.output, &artifacts.object[..]),
        (&header, artifacts.header.as_bytes()),
    ] {
        atomic::write(path, &[bytes]).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// demo

/// One built-in example: an op, its inputs and the result its specification gives.
struct Example {
    title: &'static str,
    op: Op,
    data: Tensor,
    indices: Tensor,
    updates: Option<Tensor>,
    expected: Tensor,
}

fn examples() -> Result<Vec<Example>> {
    Ok(vec![
        Example {
            title: "ONNX ScatterElements, example 1",
            op: Op::ScatterElements {
                axis: 0,
                reduction: Reduction::None,
                use_init_val: true,
            },
            data: Tensor::from_slice(&[3, 3], &[0.0f32; 9])?,
            indices: Tensor::from_slice(&[2, 3], &[1i64, 0, 2, 0, 2, 1])?,
            updates: Some(Tensor::from_slice(
                &[2, 3],
                &[1.0f32, 1.1, 1.2, 2.0, 2.1, 2.2],
            )?),
            expected: Tensor::from_slice(
                &[3, 3],
                &[2.0f32, 1.1, 0.0, 1.0, 0.0, 2.2, 0.0, 2.1, 1.2],
            )?,
        },
        Example {
            title: "ONNX ScatterElements, duplicate indices with add",
            op: Op::ScatterElements {
                axis: 1,
                reduction: Reduction::Add,
                use_init_val: true,
            },
            data: Tensor::from_slice(&[1, 5], &[1.0f32, 2.0, 3.0, 4.0, 5.0])?,
            indices: Tensor::from_slice(&[1, 2], &[1i64, 1])?,
            updates: Some(Tensor::from_slice(&[1, 2], &[1.1f32, 2.1])?),
            expected: Tensor::from_slice(&[1, 5], &[1.0f32, 5.2, 3.0, 4.0, 5.0])?,
        },
        Example {
            title: "ONNX GatherElements, example 1",
            op: Op::GatherElements { axis: 1 },
            data: Tensor::from_slice(&[2, 2], &[1.0f32, 2.0, 3.0, 4.0])?,
            indices: Tensor::from_slice(&[2, 2], &[0i64, 0, 1, 0])?,
            updates: None,
            expected: Tensor::from_slice(&[2, 2], &[1.0f32, 1.0, 4.0, 3.0])?,
        },
        Example {
            title: "ONNX Gather, example 1",
            op: Op::Gather { axis: 0 },
            data: Tensor::from_slice(&[3, 2], &[1.0f32, 1.2, 2.3, 3.4, 4.5, 5.7])?,
            indices: Tensor::from_slice(&[2, 2], &[0i64, 1, 1, 2])?,
            updates: None,
            expected: Tensor::from_slice(&[2, 2, 2], &[1.0f32, 1.2, 2.3, 3.4, 2.3, 3.4, 4.5, 5.7])?,
        },
    ])
}

/// Runs the examples; the exit status is a failure if any result differs from the expected one.
fn bench(args: BenchArgs) -> Result<()> {
    use scatterjit_cli::bench;
    let mut options = bench::Options {
        quick: args.quick,
        only: args.only,
        ..bench::Options::default()
    };
    if let Some(threads) = args.threads {
        options.threads = threads.into();
    }
    let tty = io::IsTerminal::is_terminal(&io::stderr());
    let mut last = String::new();
    let mut progress = |n: usize, of: usize, workload: &str, what: &str| {
        // A terminal gets one rewritten line; a log gets one line per workload.
        if tty {
            eprint!("\r\x1b[2K[{n}/{of}] {workload}: {what}");
        } else if last != workload {
            eprintln!("[{n}/{of}] {workload}");
            last = workload.to_string();
        }
    };
    let report = bench::run(&options, &mut progress)?;
    if tty {
        eprint!("\r\x1b[2K");
    }
    if let Some(path) = &args.plot {
        bench::plot::write_svg(&report, path)?;
    }
    let text = if args.json {
        bench::report::json(&report)
    } else {
        bench::report::table(&report)
    };
    io::stdout().write_all(text.as_bytes())?;
    Ok(())
}

fn demo() -> Result<ExitCode> {
    let examples = examples()?;
    let mut text = String::new();
    let mut wrong = 0;
    for ex in &examples {
        let key = ex
            .op
            .validate(
                ex.data.meta(),
                ex.indices.meta(),
                ex.updates.as_ref().map(Tensor::meta),
            )?
            .key;
        let result = scatterjit::run(&ex.op, &ex.data, &ex.indices, ex.updates.as_ref())?;
        let kernel = KernelCache::global().get(&key)?;
        // What the call compiled too, if anything.
        let compile_time = kernel.compile_time() + kernel.first_use_compile_time();
        let ok = result == ex.expected;
        wrong += usize::from(!ok);
        text += &format!(
            "{}\n  key       {key}\n  result    {}\n  expected  {}\n  check     {}\n  compiled  in {}\n\n",
            ex.title,
            format_f32(&result),
            format_f32(&ex.expected),
            if ok { "ok (bit-exact)" } else { "WRONG" },
            format_duration(compile_time),
        );
    }
    let stats = KernelCache::global().stats();
    text += &format!(
        "kernel cache: {} hits, {} misses, {} compiling in total\n",
        stats.hits,
        stats.misses,
        format_duration(stats.compile_time)
    );
    if wrong == 0 {
        text += &format!("all {} examples match\n", examples.len());
    }
    print_stdout(&text)?;
    if wrong > 0 {
        report(&format!(
            "{wrong} of {} examples gave a wrong result",
            examples.len()
        ));
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// An f32 tensor as nested lists (`[[1.0, 2.0], [3.0, 4.0]]`); other dtypes by dtype and shape.
fn format_f32(t: &Tensor) -> String {
    fn nest(shape: &[usize], values: &[f32]) -> String {
        match shape.split_first() {
            None => values
                .first()
                .map_or_else(String::new, |v| format!("{v:?}")),
            Some((&n, rest)) => {
                let step = rest.iter().product::<usize>();
                let parts: Vec<String> = (0..n)
                    .map(|i| nest(rest, &values[i * step..(i + 1) * step]))
                    .collect();
                format!("[{}]", parts.join(", "))
            }
        }
    }
    match t.to_vec::<f32>() {
        Ok(values) => nest(t.shape(), &values),
        Err(_) => format!("<{} tensor of shape {:?}>", t.dtype(), t.shape()),
    }
}

fn format_duration(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}
