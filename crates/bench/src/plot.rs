//! Plots of a bench report, as SVG or PNG (drawn in memory: where they go
//! is the caller's to decide):
//! throughput against threads with a line per lock and a panel per
//! (period, duty), like seed 001's plots; and the acquisition-time
//! histogram of every lock at one thread count, like seed 000's table.

use crate::experiment::{PointResult, Report};
use crate::render::{lowest_and_highest, panel_title, panels};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// Fonts tried, in order, for the plots' text (Debian's fonts-dejavu-core).
const FONT_CANDIDATES: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

/// Whether plots can be drawn here: the font they need is installed
/// (checked once, and kept).
pub fn ready() -> Result<(), String> {
    register_font()
}

fn register_font() -> Result<(), String> {
    use std::sync::OnceLock;
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            let path = FONT_CANDIDATES.iter().find(|p| Path::new(p).exists()).ok_or_else(|| {
                "plotting needs the DejaVu Sans font (apt-get install fonts-dejavu-core)".to_string()
            })?;
            let bytes: &'static [u8] = Box::leak(std::fs::read(path).map_err(|e| format!("{path}: {e}"))?.into_boxed_slice());
            plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
                .map_err(|_| format!("{path}: not a usable font"))
        })
        .clone()
}

/// Colours by series index: distinct, readable on white; as many as
/// `--locks all` and its variants make (with 12, the 13th line took the
/// first one's colour: adaptive-nobail read as adaptive).
const PALETTE: [RGBColor; 20] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
    RGBColor(0, 0, 0),
    RGBColor(120, 120, 255),
    RGBColor(0, 100, 0),
    RGBColor(128, 0, 0),
    RGBColor(0, 0, 128),
    RGBColor(128, 128, 0),
    RGBColor(0, 128, 128),
    RGBColor(218, 165, 32),
    RGBColor(153, 50, 204),
    RGBColor(255, 99, 71),
];

/// Room on the right of a figure for its legend, in pixels.
const LEGEND_WIDTH: u32 = 190;
/// A legend entry's height, and the room above the first.
const LEGEND_LINE: u32 = 22;
const LEGEND_TOP: u32 = 40;

/// A figure's height, at least its legend's (a one-row figure cut the
/// 19th lock of a long --locks off).
fn with_room_for_legend(height: u32, locks: usize) -> u32 {
    height.max(LEGEND_TOP + LEGEND_LINE * locks as u32 + 60)
}

/// Every lock's place in [`PALETTE`]: one colour a lock, whatever else a
/// figure shows (by place in the legend, `adaptive` was blue in one plot
/// and red in the next, and glibc and futex swapped red); the peers and
/// `adaptive` first, in the strongest colours, as they are drawn together
/// most.
const COLOURED: [&str; 20] = [
    "adaptive",
    "glibc",
    "glibc-adaptive",
    "glibc-pi",
    "parking_lot",
    "std",
    "futex",
    "futex-tid",
    "pi",
    "ticket",
    "mcs",
    "spin",
    "adaptive-eager",
    "adaptive-nobail",
    "adaptive-nobackoff",
    "ticket-nobackoff",
    "adaptive-oncpu",
    "adaptive-idlesleep",
    "tas-floor",
    "cas-floor",
];

/// The colour of `lock` (a recording lock's "+stats" label as its lock's).
fn colour_of(lock: &str) -> RGBColor {
    let name = lock.strip_suffix("+stats").unwrap_or(lock);
    let place = COLOURED.iter().position(|l| *l == name).unwrap_or_else(|| name.bytes().map(usize::from).sum());
    PALETTE[place % PALETTE.len()]
}

/// A floor (`tas-floor`, `cas-floor`): no lock, the bare instructions it
/// measures, drawn dashed. In colour alone they read as peers: tas-floor's
/// purple beside parking_lot's, cas-floor's red beside glibc's.
fn is_floor(lock: &str) -> bool {
    lock.ends_with("-floor")
}

/// Dashes of a floor's line, and the gaps between them, in pixels.
const FLOOR_DASH: u32 = 6;
const FLOOR_GAP: u32 = 4;

/// How `lock` is drawn: its colour, thick for ours, thin for the peers
/// (and for the floors, which are dashed).
fn line_style(lock: &str) -> ShapeStyle {
    ShapeStyle { color: colour_of(lock).to_rgba(), filled: true, stroke_width: if is_ours(lock) { 3 } else { 1 } }
}

/// The locks of `points`, in the order they first come: the legend's.
fn legend_locks<'a>(points: impl IntoIterator<Item = &'a PointResult>) -> Vec<&'a str> {
    let mut locks: Vec<&str> = Vec::new();
    for p in points {
        if !locks.contains(&p.lock.as_str()) {
            locks.push(&p.lock);
        }
    }
    locks
}

/// Splits a figure into its panels' area and a legend column on the
/// right, and draws the legend there: one for every panel, off the data
/// (drawn in each panel's corner, it hid the points at the largest
/// thread count).
fn with_legend_column<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    locks: &[&str],
) -> Result<DrawingArea<DB, Shift>, DrawingAreaErrorKind<DB::ErrorType>> {
    let (width, _) = root.dim_in_pixel();
    let (panels, legend) = root.split_horizontally(width.saturating_sub(LEGEND_WIDTH));
    for (i, lock) in locks.iter().enumerate() {
        let y = (LEGEND_TOP + LEGEND_LINE * i as u32) as i32;
        if is_floor(lock) {
            for x in [8, 18, 28] {
                legend.draw(&PathElement::new(vec![(x, y), (x + FLOOR_DASH as i32, y)], line_style(lock)))?;
            }
        } else {
            legend.draw(&PathElement::new(vec![(8, y), (34, y)], line_style(lock)))?;
        }
        legend.draw(&Text::new(lock.to_string(), (42, y - 8), ("sans-serif", 14)))?;
    }
    Ok(panels)
}

/// A panel's thread-axis ticks: the counts measured, each labelled. The
/// log axis ticked every count (1-10, 20-100, ...), whose labels ran
/// together ('910'), and labelling 1, 2 and 5 alone left a run at 4 and
/// 16 threads with no label at its points.
fn thread_ticks(points: &[&PointResult]) -> Vec<f64> {
    let mut counts: Vec<usize> = points.iter().map(|p| p.threads).collect();
    counts.sort_unstable();
    counts.dedup();
    counts.into_iter().map(|t| t as f64).collect()
}

/// Tick labels with as many decimals as a range up to `top` needs
/// ("140.00" kops/s had two too many).
fn tick_label(value: f64, top: f64) -> String {
    match top {
        t if t >= 50.0 => format!("{value:.0}"),
        t if t >= 5.0 => format!("{value:.1}"),
        _ => format!("{value:.2}"),
    }
}

/// Ours, variants included (`adaptive-nobail` is drawn as ours: it was
/// drawn thin, as a peer).
fn is_ours(lock: &str) -> bool {
    lock.parse::<crate::locks::LockKind>().is_ok_and(crate::locks::LockKind::is_ours)
}

/// The unit a panel's throughput reads in, by its highest figure (ops/s):
/// with Mops/s alone, a panel of 20,000 ops/s ticked 0.00 0.01 0.01 0.01
/// 0.02, and one of 2,000 ops/s read 0.00 at every tick.
fn throughput_unit(highest: f64) -> (&'static str, f64) {
    if highest >= 1e6 {
        ("Mops/s", 1e6)
    } else if highest >= 1e3 {
        ("kops/s", 1e3)
    } else {
        ("ops/s", 1.0)
    }
}

/// The kinds of drawing a plot can be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Image {
    /// Scalable, text: for the web and for reading its numbers.
    Svg,
    /// A bitmap: for places that show no SVG.
    Png,
}

impl Image {
    /// The drawing a file's name asks for: FILE.svg or FILE.png.
    pub fn for_file(path: &Path) -> Result<Image, String> {
        // By the name's ending, not its extension: `.svg` alone is a name
        // without one (it read "must end in .svg").
        let name = path.file_name().map(|n| n.to_string_lossy().to_ascii_lowercase()).unwrap_or_default();
        if name.ends_with(".svg") {
            Ok(Image::Svg)
        } else if name.ends_with(".png") {
            Ok(Image::Png)
        } else {
            Err(format!("{}: the plot file must end in .svg or .png", path.display()))
        }
    }
}

/// Draws an SVG or a PNG in memory and returns the file's bytes.
fn drawn_as(
    image: Image,
    size: (u32, u32),
    draw: impl FnOnce(DrawingArea<SVGBackend, Shift>) -> Result<(), String>,
    draw_png: impl FnOnce(DrawingArea<BitMapBackend, Shift>) -> Result<(), String>,
) -> Result<Vec<u8>, String> {
    register_font()?;
    match image {
        Image::Svg => {
            let mut text = String::new();
            draw(SVGBackend::with_string(&mut text, size).into_drawing_area())?;
            Ok(text.into_bytes())
        }
        Image::Png => {
            use image::ImageEncoder as _;
            let (width, height) = size;
            let mut rgb = vec![0u8; width as usize * height as usize * 3];
            draw_png(BitMapBackend::with_buffer(&mut rgb, size).into_drawing_area())?;
            let mut png = Vec::new();
            image::codecs::png::PngEncoder::new(&mut png)
                .write_image(&rgb, width, height, image::ColorType::Rgb8)
                .map_err(|e| format!("encoding the PNG: {e}"))?;
            Ok(png)
        }
    }
}

/// Throughput against threads: a panel per (period, duty), a line per lock.
pub fn throughput(report: &Report, image: Image) -> Result<Vec<u8>, String> {
    let panels = panels(report);
    let columns = panels.len().clamp(1, 3);
    let rows = panels.len().div_ceil(columns);
    // At least wide enough for the title over a single panel.
    let locks = legend_locks(&report.points).len();
    let size = ((560 * columns as u32).max(680) + LEGEND_WIDTH, with_room_for_legend(420 * rows as u32 + 40, locks));
    drawn_as(
        image,
        size,
        |area| draw_throughput(report, area, rows, columns),
        |area| draw_throughput(report, area, rows, columns),
    )
}

fn draw_throughput<DB: DrawingBackend>(report: &Report, root: DrawingArea<DB, Shift>, rows: usize, columns: usize) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let root = root
        .titled(
            &format!("lockmeter bench {}: throughput against threads ({} cores)", report.workload, report.machine.cores),
            ("sans-serif", 22),
        )
        .map_err(err)?;
    let locks = legend_locks(&report.points);
    let areas = with_legend_column(&root, &locks).map_err(err)?.split_evenly((rows, columns));
    for ((period, duty, points), area) in panels(report).into_iter().zip(areas) {
        let max_threads = points.iter().map(|p| p.threads).max().unwrap_or(1).max(2) as f64;
        let highest_run = |p: &&PointResult| p.ops_per_sec_runs.iter().copied().fold(p.ops_per_sec, f64::max);
        let highest = points.iter().map(highest_run).fold(0.0, f64::max).max(1.0);
        let (unit, per_unit) = throughput_unit(highest);
        let max_ops = highest / per_unit * 1.1;
        let mut chart = ChartBuilder::on(&area)
            .caption(panel_title(&report.workload, period, duty), ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(55)
            .build_cartesian_2d((1f64..max_threads * 1.2).log_scale().with_key_points(thread_ticks(&points)), 0f64..max_ops)
            .map_err(err)?;
        chart
            .configure_mesh()
            // The log axis's minor lines crowd into dark bands between
            // its decades (5-10, 50-70): the labelled lines only.
            .light_line_style(TRANSPARENT)
            .x_desc(if report.repeat > 1 { "threads (log scale); bars: lowest to highest run" } else { "threads (log scale)" })
            .y_desc(unit)
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| tick_label(*y, max_ops))
            .draw()
            .map_err(err)?;
        let lines: Vec<(&str, Vec<(f64, f64)>)> = locks
            .iter()
            .map(|lock| {
                let series = points.iter().filter(|p| p.lock == *lock).map(|p| (p.threads as f64, p.ops_per_sec / per_unit));
                (*lock, series.collect())
            })
            .collect();
        draw_lines(&mut chart, lines, 3).map_err(err)?;
        // Each point's lowest to highest run, in its line's colour: how
        // far apart two lines must be to differ on this machine.
        for lock in &locks {
            let colour = colour_of(lock);
            let spreads = points.iter().filter(|p| p.lock == *lock && p.ops_per_sec_runs.len() > 1).filter_map(|p| {
                let (low, high) = lowest_and_highest(&p.ops_per_sec_runs)?;
                Some(PathElement::new(vec![(p.threads as f64, low / per_unit), (p.threads as f64, high / per_unit)], colour.stroke_width(1)))
            });
            chart.draw_series(spreads).map_err(err)?;
        }
    }
    root.present().map_err(err)
}

/// The acquisition-time histogram of every lock at `threads` threads: the
/// share of timed acquisitions per log2-cycles bin, a line per lock, a
/// panel per (period, duty) (only the first was drawn, unsaid).
pub fn histogram(report: &Report, threads: usize, image: Image) -> Result<Vec<u8>, String> {
    let chosen: Vec<(String, Vec<&PointResult>)> = panels(report)
        .into_iter()
        .map(|(period, duty, points)| {
            (panel_title(&report.workload, period, duty), points.into_iter().filter(|p| p.threads == threads).collect::<Vec<_>>())
        })
        .filter(|(_, points)| !points.is_empty())
        .collect();
    if chosen.is_empty() {
        return Err(format!("no points at {} to plot a histogram of", crate::render::threads(threads)));
    }
    // An empty chart said nothing was measured as if it had been.
    if chosen.iter().flat_map(|(_, points)| points).all(|p| wait_histogram(p).iter().all(|&c| c == 0)) {
        let why = if chosen.iter().flat_map(|(_, points)| points).all(|p| p.lock == "kernel") {
            "the kernel's locks, under --fs, are not timed"
        } else {
            "1 in 8 acquisitions is timed, each thread's first not: too few were made; a longer run times more"
        };
        return Err(format!("no timed acquisitions at {} to draw ({why})", crate::render::threads(threads)));
    }
    let title = format!("Acquisition time at {} (acq time = 2^bin cycles)", crate::render::threads(threads));
    let columns = chosen.len().clamp(1, 2);
    let rows = chosen.len().div_ceil(columns);
    let locks = legend_locks(chosen.iter().flat_map(|(_, points)| points.iter().copied())).len();
    let size = (900 * columns as u32 + LEGEND_WIDTH, with_room_for_legend(500 * rows as u32 + 40, locks));
    drawn_as(
        image,
        size,
        |area| draw_histograms(&title, &chosen, area, rows, columns),
        |area| draw_histograms(&title, &chosen, area, rows, columns),
    )
}

/// A point's wait histogram (log2 cycles), empty where nothing was timed.
fn wait_histogram(p: &PointResult) -> &[u64] {
    p.wait_ns.as_ref().map_or(&[], |w| &w.hist_log2_cycles)
}

fn draw_histograms<DB: DrawingBackend>(
    title: &str,
    panels: &[(String, Vec<&PointResult>)],
    root: DrawingArea<DB, Shift>,
    rows: usize,
    columns: usize,
) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, ("sans-serif", 22)).map_err(err)?;
    let locks = legend_locks(panels.iter().flat_map(|(_, points)| points.iter().copied()));
    let areas = with_legend_column(&root, &locks).map_err(err)?.split_evenly((rows, columns));
    // One range of bins for every panel, so that panels compare at a
    // glance (each had its own).
    let every = || panels.iter().flat_map(|(_, points)| points.iter());
    let lowest = every().filter_map(|p| wait_histogram(p).iter().position(|&c| c > 0)).min().unwrap_or(0);
    let highest = every().map(|p| wait_histogram(p).len()).max().unwrap_or(1);
    for ((caption, points), area) in panels.iter().zip(areas) {
        draw_histogram(caption, points, area, lowest..highest)?;
    }
    root.present().map_err(err)
}

fn draw_histogram<DB: DrawingBackend>(
    title: &str,
    points: &[&PointResult],
    root: DrawingArea<DB, Shift>,
    bins: std::ops::Range<usize>,
) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let (lowest, highest) = (bins.start, bins.end);
    let share = |p: &PointResult, bin: usize| {
        let total: u64 = wait_histogram(p).iter().sum();
        100.0 * *wait_histogram(p).get(bin).unwrap_or(&0) as f64 / total.max(1) as f64
    };
    let top = points
        .iter()
        .flat_map(|p| (lowest..highest).map(move |b| share(p, b)))
        .fold(0.0, f64::max)
        .max(1.0)
        * 1.5;
    // On a log scale: the tail of waits of a millisecond and more, a
    // fraction of a per cent and the part that matters, lay flat on the
    // axis of a linear one. A bin under the floor is left out.
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(lowest as f64..highest as f64, (HISTOGRAM_FLOOR_PCT..top).log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("bin (acquisition time = 2^bin cycles)")
        .y_desc("% of timed acquisitions (log scale)")
        .x_labels((highest - lowest).max(1))
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| percent_on_log_scale(*y))
        .draw()
        .map_err(err)?;
    // A line through each run of bins with samples; a lone bin, a point.
    let mut lines: Vec<(&str, Vec<(f64, f64)>)> = Vec::new();
    for p in points {
        let mut run: Vec<(f64, f64)> = Vec::new();
        for bin in lowest..=highest {
            let value = if bin < highest { share(p, bin) } else { 0.0 };
            if value >= HISTOGRAM_FLOOR_PCT {
                run.push((bin as f64, value));
            } else if !run.is_empty() {
                lines.push((p.lock.as_str(), std::mem::take(&mut run)));
            }
        }
    }
    draw_lines(&mut chart, lines, 2).map_err(err)
}

/// A log scale's tick, in per cent: 0.001%, 0.01%, ... 10%, with the
/// decimals its size needs.
fn percent_on_log_scale(value: f64) -> String {
    let decimals = if value >= 1.0 { 0 } else { (-value.log10()).ceil() as usize };
    format!("{value:.decimals$}%")
}

/// The lowest share the histogram's log scale shows, in per cent.
const HISTOGRAM_FLOOR_PCT: f64 = 0.001;

/// Draws each line in its lock's style (see [`line_style`]).
fn draw_lines<'a, DB: DrawingBackend + 'a, X, Y>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    lines: Vec<(&str, Vec<(f64, f64)>)>,
    point_size: u32,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    for (lock, series) in lines {
        if is_floor(lock) {
            let style = line_style(lock);
            chart.draw_series(series.iter().map(|&point| Circle::new(point, point_size, style)))?;
            chart.draw_series(DashedLineSeries::new(series, FLOOR_DASH, FLOOR_GAP, style))?;
        } else {
            chart.draw_series(LineSeries::new(series, line_style(lock)).point_size(point_size))?;
        }
    }
    Ok(())
}

/// One variant's ratio to a baseline: its median and the range of its
/// per-round ratios.
pub struct Ratio {
    /// Variant name (a lock algorithm, or the baseline).
    pub label: String,
    /// Median of the per-round ratios.
    pub median: f64,
    /// Smallest per-round ratio.
    pub low: f64,
    /// Largest per-round ratio.
    pub high: f64,
}

/// A bar per variant at its median ratio, with a whisker over its range
/// and a line at 1.0 (the baseline), to FILE.svg or FILE.png.
pub fn ratios(title: &str, y_label: &str, ratios: &[Ratio], image: Image) -> Result<Vec<u8>, String> {
    if ratios.is_empty() {
        return Err("nothing to plot".into());
    }
    drawn_as(
        image,
        (900, 480),
        |area| draw_ratios(title, y_label, ratios, area),
        |area| draw_ratios(title, y_label, ratios, area),
    )
}

fn draw_ratios<DB: DrawingBackend>(title: &str, y_label: &str, ratios: &[Ratio], root: DrawingArea<DB, Shift>) -> Result<(), String> {
    register_font()?;
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let top = ratios.iter().map(|r| r.high.max(r.median)).fold(1.0, f64::max) * 1.15;
    let count = ratios.len();
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(-0.5f64..count as f64 - 0.5, 0f64..top)
        .map_err(err)?;
    let labels: Vec<String> = ratios.iter().map(|r| r.label.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(count)
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 { labels.get(i as usize).cloned().unwrap_or_default() } else { String::new() }
        })
        .y_desc(y_label)
        .draw()
        .map_err(err)?;
    for (i, ratio) in ratios.iter().enumerate() {
        let x = i as f64;
        // The baseline's bar in a grey no lock is drawn in.
        let colour = if is_ours(&ratio.label) { colour_of(&ratio.label) } else { RGBColor(190, 190, 190) };
        chart.draw_series(std::iter::once(Rectangle::new([(x - 0.3, 0.0), (x + 0.3, ratio.median)], colour.mix(0.7).filled()))).map_err(err)?;
        chart
            .draw_series(std::iter::once(PathElement::new(vec![(x, ratio.low), (x, ratio.high)], BLACK.stroke_width(2))))
            .map_err(err)?;
        for y in [ratio.low, ratio.high] {
            chart.draw_series(std::iter::once(PathElement::new(vec![(x - 0.1, y), (x + 0.1, y)], BLACK.stroke_width(2)))).map_err(err)?;
        }
    }
    chart
        .draw_series(std::iter::once(PathElement::new(vec![(-0.5, 1.0), (count as f64 - 0.5, 1.0)], RED.stroke_width(1))))
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{point, report};

    /// The number of lines (polylines) in the throughput plot of `report`.
    fn lines_drawn(report: &Report) -> usize {
        let svg = String::from_utf8(throughput(report, Image::Svg).unwrap()).unwrap();
        svg.matches("<polyline").count()
    }

    /// With several runs per point, every point gets a bar from its
    /// lowest to its highest run; with one, none.
    #[test]
    fn each_point_of_several_runs_gets_a_bar_of_their_range() {
        let one_run = report(vec![point("adaptive", 2, 10.0), point("std", 2, 8.0), point("adaptive", 4, 9.0), point("std", 4, 7.0)]);
        let mut three_runs = one_run.clone();
        three_runs.repeat = 3;
        // (The highest run no higher than the medians: the same axes, the
        // same grid.)
        for p in &mut three_runs.points {
            p.ops_per_sec_runs = vec![p.ops_per_sec * 0.9, p.ops_per_sec, p.ops_per_sec * 0.95];
        }
        assert_eq!(lines_drawn(&three_runs) - lines_drawn(&one_run), 4);
    }

    fn drawn(draw: impl FnOnce(Image) -> Result<Vec<u8>, String>) -> Result<String, String> {
        Ok(String::from_utf8(draw(Image::Svg)?).unwrap())
    }

    /// Our variants are drawn thick, as ours; a slow panel reads in a unit
    /// whose ticks differ.
    #[test]
    fn variants_are_ours_and_slow_panels_read_in_their_unit() {
        assert!(is_ours("adaptive") && is_ours("adaptive-nobail") && is_ours("ticket-nobackoff"));
        assert!(!is_ours("std") && !is_ours("glibc"));
        let slow = report(vec![point("adaptive", 1, 20_000.0), point("std", 1, 15_000.0), point("adaptive", 2, 21_000.0), point("std", 2, 14_000.0)]);
        let svg = drawn(|image| throughput(&slow, image)).unwrap();
        assert!(svg.contains("kops/s") && !svg.contains("Mops/s"), "the unit of a 20,000 ops/s panel");
    }

    /// Every lock of `--locks all` and its variants gets a colour of its
    /// own (the 13th took the first's: adaptive-nobail drawn as
    /// adaptive), and the legend sits beside the panels, right of every
    /// point.
    #[test]
    fn every_lock_has_its_own_colour_and_the_legend_is_off_the_data() {
        let locks = [
            "adaptive", "futex", "futex-tid", "pi", "ticket", "mcs", "spin", "glibc", "glibc-adaptive", "glibc-pi", "std",
            "parking_lot", "adaptive-nobail", "ticket-nobackoff", "adaptive-nobackoff", "adaptive-eager", "adaptive-idlesleep",
            "tas-floor", "cas-floor", "adaptive-oncpu",
        ];
        let points = locks.iter().enumerate().flat_map(|(i, lock)| [point(lock, 2, 10.0 + i as f64), point(lock, 64, 20.0 + i as f64)]).collect();
        let svg = drawn(|image| throughput(&report(points), image)).unwrap();
        let colours: std::collections::HashSet<&str> =
            svg.split("stroke=\"").skip(1).filter_map(|rest| rest.split('"').next()).filter(|c| c.starts_with('#')).collect();
        // The locks' colours, and the axes' black (one of the locks').
        assert!(colours.len() >= locks.len(), "{} colours for {} locks: {colours:?}", colours.len(), locks.len());
        let width: f64 = svg.split("width=\"").nth(1).and_then(|w| w.split('"').next()).and_then(|w| w.parse().ok()).unwrap();
        let label_x = |text: &str| -> f64 {
            let at = svg.find(&format!(">\n{text}\n</text>")).unwrap_or_else(|| panic!("{text} in the legend"));
            let tag = &svg[svg[..at].rfind("<text").unwrap()..at];
            tag.split(" x=\"").nth(1).and_then(|x| x.split('"').next()).and_then(|x| x.parse().ok()).unwrap()
        };
        for lock in ["adaptive", "ticket-nobackoff"] {
            assert!(label_x(lock) > width - f64::from(LEGEND_WIDTH), "{lock}'s label in the legend column");
        }
        // The figure is tall enough for every entry (one row of panels
        // cut the 19th off).
        let height: f64 = svg.split("height=\"").nth(1).and_then(|h| h.split('"').next()).and_then(|h| h.parse().ok()).unwrap();
        assert!(height >= f64::from(LEGEND_TOP + LEGEND_LINE * 20), "{height} px for 20 entries");
    }

    /// A lock is drawn in one colour whatever else a figure shows, and
    /// every known lock has a colour of its own.
    #[test]
    fn a_lock_keeps_its_colour_from_figure_to_figure() {
        let stroke_of = |svg: &str, lock: &str| -> String {
            // The legend's sample line comes just before the lock's label.
            let at = svg.find(&format!(">\n{lock}\n</text>")).unwrap_or_else(|| panic!("{lock} in the legend"));
            let before = &svg[..at];
            let line = &before[before.rfind("<polyline").or_else(|| before.rfind("<path")).unwrap()..];
            line.split("stroke=\"").nth(1).and_then(|c| c.split('"').next()).unwrap().to_string()
        };
        let alone = report(vec![point("adaptive", 2, 10.0), point("adaptive", 4, 11.0)]);
        let beside = report(vec![point("glibc", 2, 9.0), point("futex", 2, 8.0), point("adaptive", 2, 10.0)]);
        let (alone, beside) = (drawn(|image| throughput(&alone, image)).unwrap(), drawn(|image| throughput(&beside, image)).unwrap());
        assert_eq!(stroke_of(&alone, "adaptive"), stroke_of(&beside, "adaptive"));
        assert_ne!(stroke_of(&beside, "glibc"), stroke_of(&beside, "futex"));
        let colours: std::collections::HashSet<String> = COLOURED.iter().map(|l| format!("{:?}", colour_of(l))).collect();
        assert_eq!(colours.len(), COLOURED.len(), "a colour each");
        assert_eq!(format!("{:?}", colour_of("ticket+stats")), format!("{:?}", colour_of("ticket")));
    }

    /// A floor is drawn dashed, in the panel and in the legend: by colour
    /// alone tas-floor read as parking_lot and cas-floor as glibc.
    #[test]
    fn floors_are_dashed() {
        let lines = |lock: &str| {
            let svg = drawn(|image| throughput(&report(vec![point(lock, 2, 10.0), point(lock, 4, 9.0), point(lock, 16, 8.0)]), image)).unwrap();
            svg.matches("<polyline").count() + svg.matches("<path").count()
        };
        let (solid, dashed) = (lines("parking_lot"), lines("tas-floor"));
        assert!(dashed >= solid + 4, "{dashed} strokes for a floor, {solid} for a lock");
        assert!(is_floor("cas-floor") && !is_floor("adaptive"));
    }

    /// The thread axis is ticked and labelled at the counts measured,
    /// each once, in order (1-2-5 labels left 4 and 16 unlabelled).
    #[test]
    fn thread_ticks_are_the_counts_measured() {
        let measured = [point("std", 16, 1.0), point("adaptive", 4, 1.0), point("std", 4, 1.0), point("adaptive", 16, 1.0)];
        let points: Vec<&PointResult> = measured.iter().collect();
        assert_eq!(thread_ticks(&points), [4.0, 16.0]);
        let svg = drawn(|image| throughput(&report(measured.to_vec()), image)).unwrap();
        for label in ["4", "16"] {
            assert!(svg.contains(&format!(">\n{label}\n</text>")), "a label at {label} threads");
        }
    }

    /// Every panel gets its histogram; a report with no timed acquisition
    /// at the count asked has nothing to draw, and says so.
    #[test]
    fn the_histogram_draws_every_panel_and_refuses_an_empty_one() {
        let at = |lock: &str, period: u64| {
            let mut p = point(lock, 4, 1.0);
            (p.period_ns, p.duty_pct) = (Some(period), Some(8));
            p.wait_ns.as_mut().unwrap().hist_log2_cycles = vec![0, 3, 5, 1];
            p
        };
        let two_panels = report(vec![at("adaptive", 1000), at("std", 1000), at("adaptive", 10000), at("std", 10000)]);
        let svg = drawn(|image| histogram(&two_panels, 4, image)).unwrap();
        assert!(svg.contains("P=1000ns") && svg.contains("P=10000ns"), "both panels drawn");
        let mut untimed = report(vec![point("glibc", 4, 1.0)]);
        untimed.points[0].wait_ns = None;
        let refused = drawn(|image| histogram(&untimed, 4, image)).unwrap_err();
        assert!(refused.contains("no timed acquisitions at 4 threads") && refused.contains("too few were made"), "{refused}");
        let mut kernel = report(vec![point("kernel", 4, 1.0)]);
        kernel.points[0].wait_ns = None;
        let refused = drawn(|image| histogram(&kernel, 4, image)).unwrap_err();
        assert!(refused.contains("the kernel's locks, under --fs, are not timed"), "{refused}");
    }
}
