//! A figure of the bench and its place in the tables: a measured value or why it is
//! missing, the numbered notes failures become, ratios to a limit, and message sizes as
//! the tables name them.

/// A measured figure, or why it is missing.
pub type Figure = Result<f64, String>;

/// Collects failure reasons as numbered notes under the tables.
#[derive(Default)]
pub struct Notes(pub Vec<String>);

impl Notes {
    /// The figure with `prec` decimals and `unit`, or "failed [n]" with its reason noted.
    pub fn fig(&mut self, f: &Figure, prec: usize, unit: &str) -> String {
        match f {
            Ok(v) => format!("{v:.prec$} {unit}"),
            Err(e) => {
                let e = e.replace('|', "/").replace('\n', " ");
                let n = match self.0.iter().position(|x| *x == e) {
                    Some(i) => i + 1,
                    None => {
                        self.0.push(e);
                        self.0.len()
                    }
                };
                format!("failed [{n}]")
            }
        }
    }
}

pub fn ratio(a: &Figure, b: &Figure) -> Option<f64> {
    match (a, b) {
        (Ok(a), Ok(b)) if *b > 0.0 => Some(a / b),
        _ => None,
    }
}

pub fn show_ratio(r: Option<f64>, what: &str) -> String {
    r.map_or_else(String::new, |r| format!(" · {r:.2} {what}"))
}

/// The median of the runs that worked, else the first failure.
pub fn median(runs: Vec<Figure>) -> Figure {
    let mut ok: Vec<f64> = runs
        .iter()
        .filter_map(|r| r.as_ref().ok().copied())
        .collect();
    if ok.is_empty() {
        return runs
            .into_iter()
            .next()
            .unwrap_or_else(|| Err("not run".into()));
    }
    ok.sort_by(f64::total_cmp);
    Ok(ok[ok.len() / 2])
}

pub fn size_name(size: u64) -> String {
    match size {
        s if s >= 1 << 20 => format!("{} MiB", s >> 20),
        s if s >= 1024 => format!("{} KiB", s >> 10),
        s => format!("{s} B"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_skips_failures_and_a_figure_that_never_ran_keeps_its_reason() {
        assert_eq!(
            median(vec![Ok(3.0), Err("x".into()), Ok(1.0), Ok(2.0)]),
            Ok(2.0)
        );
        assert_eq!(median(vec![Ok(5.0), Ok(1.0)]), Ok(5.0));
        assert_eq!(
            median(vec![Err("no daemon".into()), Err("again".into())]),
            Err("no daemon".into())
        );
        assert_eq!(median(Vec::new()), Err("not run".into()));
    }

    #[test]
    fn a_failure_is_noted_once_and_numbered() {
        let mut notes = Notes::default();
        assert_eq!(notes.fig(&Ok(1.234), 2, "GB/s"), "1.23 GB/s");
        assert_eq!(notes.fig(&Err("timed out".into()), 2, "µs"), "failed [1]");
        assert_eq!(notes.fig(&Err("refused".into()), 2, "µs"), "failed [2]");
        assert_eq!(notes.fig(&Err("timed out".into()), 2, "µs"), "failed [1]");
        assert_eq!(notes.0, ["timed out", "refused"]);
    }
}
