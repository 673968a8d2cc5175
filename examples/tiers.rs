//! What the specialized variants save over the `Strided` code that calls run before their
//! passes specialize (see `Kernel::compile`), per element of work: the figure that
//! `scatterjit::SPECIALIZE_AFTER` is weighed against. Each workload of the suite runs at
//! three sizes on two kernels of its key, one that stays on `Strided` code
//! (`Kernel::stay_unspecialized`) and one that specializes at once, and prints the median
//! of each and the elements after which the saving repays a compile of `--compile-us`
//! microseconds (default 200).
//!
//! ```text
//! RAYON_NUM_THREADS=1 cargo run --release -p scatterjit --example tiers [compile us]
//! ```

use std::time::Instant;

use scatterjit::{Kernel, Tensor, TensorView, TensorViewMut};
use scatterjit_testkit::suite::WORKLOADS;

/// Calls per median.
const CALLS: usize = 31;

fn main() {
    let compile_us: f64 = std::env::args()
        .nth(1)
        .map_or(200.0, |s| s.parse().expect("compile time in microseconds"));
    // The second kernel of each key specializes on its first call.
    scatterjit::set_specialize_after(0);
    println!("workload                       elements  strided us  specialized us  saved ns/element  repaid after");
    for w in WORKLOADS {
        for div in [1024, 128, 16] {
            let p = w.problem(div, 0);
            let key = p.key();
            let strided = Kernel::compile(key).expect("suite keys compile");
            strided.stay_unspecialized();
            let specialized = Kernel::compile(key).expect("suite keys compile");
            let data = TensorView::from(&p.data);
            let indices = p.index_view().expect("suite views are valid");
            let updates = p.updates.as_ref().map(TensorView::from);
            let want = strided
                .run(&data, &indices, updates.as_ref())
                .expect("suite problems run");
            let mut out = Tensor::zeros(key.dtype(), want.shape().to_vec()).expect("output");
            let mut median = |kernel: &Kernel| {
                let mut times: Vec<f64> = (0..CALLS)
                    .map(|_| {
                        let mut view = TensorViewMut::from(&mut out);
                        let start = Instant::now();
                        kernel
                            .run_into(&mut view, &data, &indices, updates.as_ref())
                            .expect("suite problems run");
                        start.elapsed().as_secs_f64()
                    })
                    .collect();
                times.sort_by(f64::total_cmp);
                times[CALLS / 2]
            };
            let (slow, fast) = (median(&strided), median(&specialized));
            assert_eq!(
                out.bytes(),
                want.bytes(),
                "{}: the two kernels differ",
                w.name
            );
            let n = p.elements() as f64;
            let saved = (slow - fast) / n;
            let repaid = match saved > 0.0 {
                true => format!("{:.0}", compile_us * 1e-6 / saved),
                false => "never".to_string(),
            };
            println!(
                "{:29} {:>9}  {:>10.1}  {:>14.1}  {:>16.2}  {:>12}",
                w.name,
                p.elements(),
                slow * 1e6,
                fast * 1e6,
                saved * 1e9,
                repaid
            );
        }
    }
}
