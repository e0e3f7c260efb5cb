//! `steer plot`: pictures of the benchmark results, as SVG. It reads
//! steer-bench's `--json` report (the kernel-vs-steer capacity, latency and
//! cost bars) and seed 000's `--json` files (steering updates per second,
//! `always` vs `llc`, one line per topology and policy across the runs)
//! and `steer-bench frontier --json` (a scatter of CPU us per reply
//! against p99, a colour per server kind, each point labelled), and
//! writes one SVG per steer-bench report, one per frontier report and
//! one for all seed 000 files, into `target/` or `--out DIR`. A file it cannot read is a
//! one-line error.
//!
//! Why in `steer`: it is the command a user has and finds in `steer
//! --help`; steer-bench is a tool for whoever measures. Why plotters: a
//! well-kept plotting crate whose SVG backend needs no font or image
//! library (built here with only that backend).

mod draw;
mod input;

use std::path::{Path, PathBuf};

use clap::Args;

use input::Input;

/// `steer plot` arguments.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    steer plot benches/seeds/results/seed000-llc-steering-*.json       -> target/seed000-updates.svg\n  \
    steer-bench run --json bench.json && steer plot bench.json --out docs")]
pub struct PlotArgs {
    /// steer-bench `--json` reports (`run`, `frontier`) and seed 000 `--json` files.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Directory for the SVG files.
    #[arg(long, short = 'o', default_value = "target")]
    pub out: PathBuf,
}

pub fn run(args: &PlotArgs) -> anyhow::Result<()> {
    let mut seed = Vec::new();
    let mut bench = Vec::new();
    let mut scatters = Vec::new();
    for f in &args.files {
        match input::read(f)? {
            Input::Seed000(r) => seed.push(r),
            Input::Bench(r) => bench.push((f, r)),
            Input::Scatter(s) => scatters.push((f, s)),
        }
    }
    std::fs::create_dir_all(&args.out)
        .map_err(|e| anyhow::anyhow!("creating {}: {e}", args.out.display()))?;
    let write = |name: String, svg: String| -> anyhow::Result<()> {
        let path = args.out.join(name);
        std::fs::write(&path, svg)
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
        println!("{}", path.display());
        Ok(())
    };
    if !seed.is_empty() {
        let svg = draw::seed000(
            &seed,
            "seed 000: steering updates/s, `always` (kernel RFS) vs `llc`",
        )
        .map_err(anyhow::Error::msg)?;
        write("seed000-updates.svg".into(), svg)?;
    }
    for (f, r) in bench {
        let svg =
            draw::bench(&r, "steer vs the kernel (steer-bench)").map_err(anyhow::Error::msg)?;
        write(format!("bench-{}.svg", stem(f)), svg)?;
    }
    for (f, s) in scatters {
        let svg = draw::scatter(&s).map_err(anyhow::Error::msg)?;
        write(format!("frontier-{}.svg", stem(f)), svg)?;
    }
    Ok(())
}

fn stem(p: &Path) -> String {
    p.file_stem()
        .map_or("report".into(), |s| s.to_string_lossy().into_owned())
}
