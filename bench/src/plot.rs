//! SVG plot of throughput (201s per second) and p99 latency over time, one line per run.

use std::path::Path;
use std::time::Duration;

use plotters::prelude::*;

use crate::sale::SaleResult;

const BUCKET: Duration = Duration::from_millis(250);
const COLORS: [RGBColor; 4] = [BLUE, RED, GREEN, MAGENTA];

/// Points of one line: (seconds, value).
type Line = Vec<(f64, f64)>;

fn series(r: &SaleResult) -> (Line, Line) {
    let buckets = (r.elapsed.as_millis() / BUCKET.as_millis()) as usize + 1;
    let mut created = vec![0u64; buckets];
    let mut lat: Vec<Vec<u64>> = vec![Vec::new(); buckets];
    for s in &r.samples {
        let b = ((s.at.as_millis() / BUCKET.as_millis()) as usize).min(buckets - 1);
        if s.status == 201 {
            created[b] += 1;
        }
        lat[b].push(u64::try_from(s.latency.as_micros()).unwrap_or(u64::MAX));
    }
    let secs = BUCKET.as_secs_f64();
    let tput = created
        .iter()
        .enumerate()
        .map(|(i, n)| (i as f64 * secs, *n as f64 / secs))
        .collect();
    let p99 = lat
        .iter_mut()
        .enumerate()
        .filter(|(_, v)| !v.is_empty())
        .map(|(i, v)| {
            v.sort_unstable();
            let idx = ((v.len() as f64 * 0.99).ceil() as usize)
                .saturating_sub(1)
                .min(v.len() - 1);
            (i as f64 * secs, v[idx] as f64 / 1000.0)
        })
        .collect();
    (tput, p99)
}

/// Writes every request of each result to `<dir>/<label>-<name>.csv`: seconds since the sale
/// began when it was sent, its latency in milliseconds, its status (0: transport error).
pub(crate) fn write_samples(
    dir: &Path,
    label: &str,
    results: &[&SaleResult],
) -> anyhow::Result<()> {
    use std::io::Write as _;
    std::fs::create_dir_all(dir)?;
    for r in results {
        let path = dir.join(format!("{label}-{}.csv", r.name));
        let mut out = std::io::BufWriter::new(std::fs::File::create(&path)?);
        writeln!(out, "sent_s,latency_ms,status")?;
        for s in &r.samples {
            writeln!(
                out,
                "{:.6},{:.3},{}",
                s.at.saturating_sub(s.latency).as_secs_f64(),
                s.latency.as_secs_f64() * 1000.0,
                s.status
            )?;
        }
        out.flush()?;
        eprintln!("samples written to {}", path.display());
    }
    Ok(())
}

/// Writes `<dir>/<label>.svg`.
pub(crate) fn write(dir: &Path, label: &str, results: &[&SaleResult]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(format!("{label}.svg"));
    let root = SVGBackend::new(&path, (1000, 700)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(350);
    let data: Vec<_> = results
        .iter()
        .map(|r| (r.name.clone(), series(r)))
        .collect();
    let max_t = results
        .iter()
        .map(|r| r.elapsed.as_secs_f64())
        .fold(1.0, f64::max);
    let max_tp = data
        .iter()
        .flat_map(|(_, (t, _))| t.iter().map(|p| p.1))
        .fold(1.0, f64::max);
    let max_lat = data
        .iter()
        .flat_map(|(_, (_, l))| l.iter().map(|p| p.1))
        .fold(1.0, f64::max);

    let names: Vec<String> = data.iter().map(|(n, _)| n.clone()).collect();
    let tput: Vec<&Line> = data.iter().map(|(_, (t, _))| t).collect();
    let p99: Vec<&Line> = data.iter().map(|(_, (_, l))| l).collect();
    panel(
        &top,
        "Confirmed purchases per second",
        "201/s",
        max_t,
        max_tp,
        &names,
        &tput,
    )?;
    panel(
        &bottom,
        "p99 latency (ms) per 250 ms window",
        "ms",
        max_t,
        max_lat,
        &names,
        &p99,
    )?;
    root.present()?;
    eprintln!("plot written to {}", path.display());
    Ok(())
}

/// One chart: a line per run.
fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    caption: &str,
    y_desc: &str,
    max_x: f64,
    max_y: f64,
    names: &[String],
    lines: &[&Line],
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..max_x, 0.0..max_y * 1.1)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc(y_desc)
        .draw()?;
    for (i, (name, line)) in names.iter().zip(lines).enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(line.iter().copied(), color))?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE)
        .draw()?;
    Ok(())
}
