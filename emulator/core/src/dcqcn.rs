//! The reaction point of DCQCN (Data Center QCN: Zhu et al., "Congestion Control for
//! Large-Scale RDMA Deployments", SIGCOMM 2015): per QP, a current rate R_C that a CNP cuts
//! by α/2 and two timers and a byte counter raise again, and the requester paces its
//! packets to R_C.
//!
//! The state machine is the paper's, in integer arithmetic as a NIC keeps it (rates in
//! bit/s, α in 1/1024ths):
//!
//! - On a CNP (at most one cut per rate-reduce monitor period): R_T = R_C,
//!   R_C = R_C·(1 − α/2), α = (1 − g)·α + g; the increase stages and the byte count restart.
//! - Every α period without a CNP: α = (1 − g)·α.
//! - Every rate-increase period, and every time `byte_reset` bytes were sent, one increase
//!   event of its kind. With T and BC the events of each kind since the last cut and F the
//!   threshold: while both are below F, fast recovery (R_C = (R_T + R_C)/2); once either
//!   reaches F, additive increase (R_T += R_AI, then the same averaging); once both exceed
//!   F, hyper increase (R_T += i·R_HAI with i = min(T, BC) − F).
//! - R_C never goes below the minimum rate nor above the line rate.
//!
//! A QP has no reaction point until its first CNP (it sends unpaced, at the line rate), and
//! loses it again once α has decayed to zero and R_C is back at the rate it started from:
//! with no congestion the device behaves exactly as without DCQCN.

use std::time::{Duration, Instant};

/// α and g are fractions in 1/1024ths (ConnectX keeps α in 10 bits).
pub const ALPHA_ONE: u32 = 1024;

/// The parameters of the reaction point, named after ConnectX's (`rpg_*`, `dce_tcp_*`:
/// NVIDIA's DCQCN parameter documentation and `mlxconfig`'s `ROCE_CC` settings).
///
/// Defaults: the rate-increase machinery and α's initial value are ConnectX's documented
/// firmware defaults (`rpg_time_reset` 300 µs, `rpg_byte_reset` 32767 B, `rpg_threshold` 1,
/// `rpg_ai_rate` 5 Mbit/s, `rpg_hai_rate` 50 Mbit/s, `rpg_min_rate` 1 Mbit/s,
/// `rate_reduce_monitor_period` 4 µs, `initial_alpha_value` 1023); α's gain and update
/// period are the SIGCOMM 2015 paper's (g = 1/256, K = 55 µs), since ConnectX's
/// `dce_tcp_g`/`dce_tcp_rtt` scale them in a way its documentation does not pin down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DcqcnParams {
    /// Whether CNPs cut the rate. Off: they are counted as `rp_cnp_ignored`, as on a NIC
    /// with the reaction point disabled.
    pub enabled: bool,
    /// The line rate R_C starts from and never exceeds, in Mbit/s (`rpg_max_rate`).
    /// 0: unknown (a software NIC on a veth or loopback has none): the first cut starts from
    /// the rate the QP was measured sending at, and the QP returns to unpaced once it is
    /// back there.
    pub max_rate_mbps: u32,
    /// The lowest rate a cut leaves, in Mbit/s (`rpg_min_rate`).
    pub min_rate_mbps: u32,
    /// Additive increase step R_AI, in Mbit/s (`rpg_ai_rate`).
    pub ai_rate_mbps: u32,
    /// Hyper increase step R_HAI, in Mbit/s (`rpg_hai_rate`).
    pub hai_rate_mbps: u32,
    /// The rate-increase timer period T, in µs (`rpg_time_reset`).
    pub time_reset_us: u32,
    /// Bytes sent between two byte-counter increase events B (`rpg_byte_reset`).
    pub byte_reset: u32,
    /// Fast-recovery stages F (`rpg_threshold`).
    pub threshold: u32,
    /// α's gain g, in 1/1024ths.
    pub g: u32,
    /// α's update period K without a CNP, in µs.
    pub alpha_period_us: u32,
    /// α at the first CNP, in 1/1024ths (`initial_alpha_value`).
    pub initial_alpha: u32,
    /// At most one cut per this many µs (`rate_reduce_monitor_period`).
    pub rate_reduce_monitor_period_us: u32,
}

impl Default for DcqcnParams {
    fn default() -> Self {
        DcqcnParams {
            enabled: true,
            max_rate_mbps: 0,
            min_rate_mbps: 1,
            ai_rate_mbps: 5,
            hai_rate_mbps: 50,
            time_reset_us: 300,
            byte_reset: 32767,
            threshold: 1,
            g: 4,
            alpha_period_us: 55,
            initial_alpha: 1023,
            rate_reduce_monitor_period_us: 4,
        }
    }
}

impl DcqcnParams {
    /// Checks the values a cut and an increase rely on: g and α at most 1, a minimum rate
    /// below the line rate, non-zero periods and byte count.
    pub fn validate(&self) -> Result<(), String> {
        if self.g == 0 || self.g > ALPHA_ONE {
            return Err(format!("g {} is not in 1..=1024 (1/1024ths)", self.g));
        }
        if self.initial_alpha > ALPHA_ONE {
            return Err(format!(
                "initial_alpha {} is more than 1024 (1/1024ths)",
                self.initial_alpha
            ));
        }
        if self.min_rate_mbps == 0 {
            return Err("min_rate_mbps must be at least 1".into());
        }
        if self.max_rate_mbps != 0 && self.max_rate_mbps < self.min_rate_mbps {
            return Err(format!(
                "max_rate_mbps {} is below min_rate_mbps {}",
                self.max_rate_mbps, self.min_rate_mbps
            ));
        }
        if self.time_reset_us == 0 || self.alpha_period_us == 0 || self.byte_reset == 0 {
            return Err("time_reset_us, alpha_period_us and byte_reset must be non-zero".into());
        }
        Ok(())
    }

    pub(crate) fn bps(mbps: u32) -> u64 {
        u64::from(mbps) * 1_000_000
    }

    /// The rate-increase timer period.
    pub fn time_reset(&self) -> Duration {
        Duration::from_micros(u64::from(self.time_reset_us))
    }

    /// α's update period.
    pub fn alpha_period(&self) -> Duration {
        Duration::from_micros(u64::from(self.alpha_period_us))
    }
}

/// How fast a QP sent lately, for the first cut when the line rate is unknown.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TxMeter {
    start: Option<Instant>,
    bytes: u64,
    /// Bit/s over the last complete window.
    last: u64,
}

/// The meter's window.
const METER_WINDOW: Duration = Duration::from_micros(100);

impl TxMeter {
    /// `bytes` left at `now`.
    pub fn sent(&mut self, now: Instant, bytes: usize) {
        let start = *self.start.get_or_insert(now);
        let elapsed = now.saturating_duration_since(start);
        if elapsed >= METER_WINDOW {
            self.last = rate_of(self.bytes, elapsed);
            self.start = Some(now);
            self.bytes = 0;
        }
        self.bytes += bytes as u64;
    }

    /// The rate over the last complete window; before the first one closed, over the
    /// current one.
    pub fn rate(&self, now: Instant) -> u64 {
        if self.last > 0 {
            return self.last;
        }
        self.start
            .map(|s| now.saturating_duration_since(s))
            .filter(|e| !e.is_zero())
            .map_or(0, |e| rate_of(self.bytes, e))
    }
}

fn rate_of(bytes: u64, over: Duration) -> u64 {
    let ns = over.as_nanos().max(1);
    (u128::from(bytes) * 8 * 1_000_000_000 / ns).min(u128::from(u64::MAX)) as u64
}

/// One QP's reaction point.
#[derive(Debug, Clone)]
pub(crate) struct ReactionPoint {
    /// Current rate R_C, bit/s.
    pub rc: u64,
    /// Target rate R_T, bit/s.
    pub rt: u64,
    /// α in 1/1024ths.
    pub alpha: u32,
    /// Timer increase events since the last cut (T).
    t_stage: u32,
    /// Byte-counter increase events since the last cut (BC).
    bc_stage: u32,
    /// Bytes sent since the last byte-counter event.
    bytes: u64,
    /// When the rate was last cut.
    last_cut: Option<Instant>,
    /// A CNP arrived in the current α period.
    cnp_this_period: bool,
    /// The rate the QP returns to unpaced at (the line rate, or the measured rate the
    /// first cut started from).
    pub ceiling: u64,
    /// When the next request packet may leave.
    pub next_send: Instant,
}

impl ReactionPoint {
    /// A reaction point starting at `rate` bit/s (the line rate or the measured one).
    pub fn new(p: &DcqcnParams, now: Instant, rate: u64) -> Self {
        let rate = rate.max(DcqcnParams::bps(p.min_rate_mbps));
        ReactionPoint {
            rc: rate,
            rt: rate,
            alpha: p.initial_alpha,
            t_stage: 0,
            bc_stage: 0,
            bytes: 0,
            last_cut: None,
            cnp_this_period: false,
            ceiling: rate,
            next_send: now,
        }
    }

    /// A CNP arrived: cuts the rate unless one was cut less than the monitor period ago.
    /// Whether it cut.
    pub fn on_cnp(&mut self, p: &DcqcnParams, now: Instant) -> bool {
        self.cnp_this_period = true;
        let period = Duration::from_micros(u64::from(p.rate_reduce_monitor_period_us));
        if self
            .last_cut
            .is_some_and(|t| now.saturating_duration_since(t) < period)
        {
            return false;
        }
        self.last_cut = Some(now);
        self.rt = self.rc;
        let keep = u64::from(2 * ALPHA_ONE - self.alpha);
        let cut = (u128::from(self.rc) * u128::from(keep) / u128::from(2 * ALPHA_ONE)) as u64;
        self.rc = cut.max(DcqcnParams::bps(p.min_rate_mbps));
        self.alpha = (self.alpha * (ALPHA_ONE - p.g) + ALPHA_ONE * p.g) / ALPHA_ONE;
        self.t_stage = 0;
        self.bc_stage = 0;
        self.bytes = 0;
        true
    }

    /// The α period ended: α decays unless a CNP arrived in it.
    pub fn on_alpha_timer(&mut self, p: &DcqcnParams) {
        if !std::mem::take(&mut self.cnp_this_period) {
            self.alpha = self.alpha * (ALPHA_ONE - p.g) / ALPHA_ONE;
        }
    }

    /// The rate-increase timer fired.
    pub fn on_rate_timer(&mut self, p: &DcqcnParams) {
        self.t_stage = self.t_stage.saturating_add(1);
        self.increase(p);
    }

    /// A request packet of `bytes` left at `now`: the next one is due when it would have
    /// taken R_C to send it; every `byte_reset` bytes is a byte-counter increase event.
    pub fn on_sent(&mut self, p: &DcqcnParams, now: Instant, bytes: usize) {
        let ns = (bytes as u128 * 8 * 1_000_000_000 / u128::from(self.rc.max(1)))
            .min(u128::from(u64::MAX)) as u64;
        self.next_send = self.next_send.max(now) + Duration::from_nanos(ns);
        self.bytes += bytes as u64;
        if self.bytes >= u64::from(p.byte_reset) {
            self.bytes -= u64::from(p.byte_reset);
            self.bc_stage = self.bc_stage.saturating_add(1);
            self.increase(p);
        }
    }

    fn increase(&mut self, p: &DcqcnParams) {
        let f = p.threshold;
        let (t, bc) = (self.t_stage, self.bc_stage);
        if t > f && bc > f {
            let i = u64::from(t.min(bc) - f);
            self.rt = self
                .rt
                .saturating_add(i.saturating_mul(DcqcnParams::bps(p.hai_rate_mbps)));
        } else if t >= f || bc >= f {
            self.rt = self.rt.saturating_add(DcqcnParams::bps(p.ai_rate_mbps));
        }
        if p.max_rate_mbps != 0 {
            self.rt = self.rt.min(DcqcnParams::bps(p.max_rate_mbps));
        }
        // Half way towards the target, rounding up so the gap closes.
        self.rc = self.rc + (self.rt.saturating_sub(self.rc)).div_ceil(2);
    }

    /// Back where it started with nothing left to forget: the QP may send unpaced again.
    pub fn recovered(&self) -> bool {
        self.alpha == 0 && self.rc >= self.ceiling
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GBIT: u64 = 1_000_000_000;

    fn params() -> DcqcnParams {
        DcqcnParams {
            max_rate_mbps: 10_000,
            ..DcqcnParams::default()
        }
    }

    #[test]
    fn a_cnp_sets_the_target_and_cuts_by_half_alpha() {
        let p = params();
        let now = Instant::now();
        let mut rp = ReactionPoint::new(&p, now, 10 * GBIT);
        assert!(rp.on_cnp(&p, now));
        assert_eq!(rp.rt, 10 * GBIT);
        // α = 1023/1024: R_C · (1 − 1023/2048).
        assert_eq!(rp.rc, 10 * GBIT * 1025 / 2048);
        // α = (1 − 4/1024)·1023 + 4 = 1023.0 (integer).
        assert_eq!(rp.alpha, (1023 * 1020 + 4096) / 1024);
        // A second CNP within the monitor period does not cut.
        let rc = rp.rc;
        assert!(!rp.on_cnp(&p, now + Duration::from_micros(3)));
        assert_eq!(rp.rc, rc);
        assert!(rp.on_cnp(&p, now + Duration::from_micros(4)));
        assert!(rp.rc < rc);
    }

    #[test]
    fn cuts_stop_at_the_minimum_rate() {
        let p = params();
        let mut now = Instant::now();
        let mut rp = ReactionPoint::new(&p, now, 10 * GBIT);
        for _ in 0..100 {
            now += Duration::from_micros(50);
            rp.on_cnp(&p, now);
        }
        assert_eq!(rp.rc, 1_000_000);
    }

    #[test]
    fn alpha_decays_only_in_periods_without_a_cnp() {
        let p = params();
        let now = Instant::now();
        let mut rp = ReactionPoint::new(&p, now, GBIT);
        rp.on_cnp(&p, now);
        let a = rp.alpha;
        rp.on_alpha_timer(&p);
        assert_eq!(rp.alpha, a, "a CNP came in this period");
        rp.on_alpha_timer(&p);
        assert_eq!(rp.alpha, a * 1020 / 1024);
        for _ in 0..5000 {
            rp.on_alpha_timer(&p);
        }
        assert_eq!(rp.alpha, 0);
    }

    #[test]
    fn fast_recovery_then_additive_then_hyper_increase() {
        let p = DcqcnParams {
            threshold: 2,
            ..params()
        };
        let now = Instant::now();
        let mut rp = ReactionPoint::new(&p, now, 8 * GBIT);
        rp.on_cnp(&p, now);
        let (rt, rc) = (rp.rt, rp.rc);
        // T = 1 < F: fast recovery, R_T unchanged.
        rp.on_rate_timer(&p);
        assert_eq!(rp.rt, rt);
        assert_eq!(rp.rc, rc + (rt - rc).div_ceil(2));
        // T = 2 = F: additive increase.
        rp.on_rate_timer(&p);
        assert_eq!(rp.rt, rt + 5_000_000);
        // Byte counter to BC = 3 (> F) and T = 3 (> F): hyper increase with i = 1.
        for _ in 0..2 {
            rp.on_sent(&p, now, p.byte_reset as usize);
        }
        let rt = rp.rt;
        rp.on_sent(&p, now, p.byte_reset as usize); // BC = 3, T = 2: additive
        assert_eq!(rp.rt, rt + 5_000_000);
        let rt = rp.rt;
        rp.on_rate_timer(&p); // T = 3, BC = 3: hyper, i = 1
        assert_eq!(rp.rt, rt + 50_000_000);
    }

    #[test]
    fn the_rate_never_exceeds_the_line_rate_and_recovers_to_it() {
        let p = params();
        let now = Instant::now();
        let mut rp = ReactionPoint::new(&p, now, 10 * GBIT);
        rp.on_cnp(&p, now);
        assert!(!rp.recovered());
        for _ in 0..5000 {
            rp.on_rate_timer(&p);
            rp.on_alpha_timer(&p);
        }
        assert_eq!((rp.rt, rp.rc), (10 * GBIT, 10 * GBIT));
        assert!(rp.recovered());
    }

    #[test]
    fn packets_are_spaced_at_the_current_rate() {
        let p = params();
        let t0 = Instant::now();
        let mut rp = ReactionPoint::new(&p, t0, GBIT);
        rp.on_sent(&p, t0, 1000);
        // 8000 bits at 1 Gbit/s: 8 µs.
        assert_eq!(rp.next_send, t0 + Duration::from_micros(8));
        rp.on_sent(&p, t0 + Duration::from_micros(8), 1000);
        assert_eq!(rp.next_send, t0 + Duration::from_micros(16));
        // After an idle gap the budget does not accumulate.
        let later = t0 + Duration::from_millis(1);
        rp.on_sent(&p, later, 1000);
        assert_eq!(rp.next_send, later + Duration::from_micros(8));
    }

    #[test]
    fn the_meter_reports_the_recent_rate() {
        let t0 = Instant::now();
        let mut m = TxMeter::default();
        for i in 0..=20u64 {
            m.sent(t0 + Duration::from_micros(8 * i), 1000);
        }
        let r = m.rate(t0 + Duration::from_micros(160));
        assert!((900_000_000..=1_100_000_000).contains(&r), "{r}");
    }

    #[test]
    fn bad_parameters_are_refused() {
        assert!(DcqcnParams::default().validate().is_ok());
        for bad in [
            DcqcnParams {
                g: 0,
                ..DcqcnParams::default()
            },
            DcqcnParams {
                initial_alpha: 2000,
                ..DcqcnParams::default()
            },
            DcqcnParams {
                min_rate_mbps: 0,
                ..DcqcnParams::default()
            },
            DcqcnParams {
                max_rate_mbps: 5,
                min_rate_mbps: 10,
                ..DcqcnParams::default()
            },
            DcqcnParams {
                byte_reset: 0,
                ..DcqcnParams::default()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
