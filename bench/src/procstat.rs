//! What a process holds and uses, read from `/proc` (Linux) through `procfs`: resident memory,
//! open file descriptors and CPU time of the benchmark's processes, and the machine's CPU,
//! memory and load for the reports.

use procfs::Current as _;
use procfs::process::Process;

fn process(pid: u32) -> Option<Process> {
    Process::new(i32::try_from(pid).ok()?).ok()
}

/// Resident set size in bytes (`VmRSS` of `/proc/<pid>/status`); `None` if the process is gone.
pub(crate) fn rss_bytes(pid: u32) -> Option<u64> {
    Some(process(pid)?.status().ok()?.vmrss? * 1024)
}

/// Open file descriptors (entries of `/proc/<pid>/fd`); `None` if the process is gone.
pub(crate) fn open_fds(pid: u32) -> Option<usize> {
    process(pid)?.fd_count().ok()
}

/// One line describing this machine: CPU model, cores, memory.
pub(crate) fn machine() -> String {
    let cpu = procfs::CpuInfo::current()
        .ok()
        .and_then(|info| info.model_name(0).map(str::to_owned))
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_gib =
        procfs::Meminfo::current().map_or(0.0, |m| m.mem_total as f64 / 1024.0 / 1024.0 / 1024.0);
    format!("{cpu}, {cores} cores, {mem_gib:.0} GiB")
}

/// The 1-minute load average.
pub(crate) fn load_average() -> String {
    procfs::LoadAverage::current().map_or_else(|_| "?".into(), |l| format!("{:.2}", l.one))
}

/// CPU time (user + system) the process has used so far, in seconds; `None` if it is gone.
pub(crate) fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = process(pid)?.stat().ok()?;
    Some((stat.utime + stat.stime) as f64 / procfs::ticks_per_second() as f64)
}

/// Processes whose command name (`/proc/<pid>/comm`) is `name`.
pub(crate) fn pids_named(name: &str) -> Vec<u32> {
    let Ok(all) = procfs::process::all_processes() else {
        return Vec::new();
    };
    all.filter_map(|p| p.ok())
        .filter(|p| p.stat().is_ok_and(|stat| stat.comm == name))
        .filter_map(|p| u32::try_from(p.pid()).ok())
        .collect()
}

/// CPU seconds used by each part of a benchmark cluster over an interval ([`CpuSample::since`]).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CpuUse {
    /// This process: the shoppers (HTTP client, request signing) and the progress bar.
    pub(crate) load_generator: f64,
    pub(crate) origins: f64,
    pub(crate) redis: f64,
    /// Every `postgres` process on the machine (the server is shared; run on a quiet machine).
    pub(crate) postgres: f64,
}

impl CpuUse {
    pub(crate) fn total(self) -> f64 {
        self.load_generator + self.origins + self.redis + self.postgres
    }
}

/// CPU seconds used so far by each part of a benchmark cluster, read at one instant.
#[derive(Debug, Clone, Default)]
pub(crate) struct CpuSample {
    load_generator: f64,
    origins: f64,
    redis: f64,
    /// Per `postgres` process: backends come and go during a run.
    postgres: Vec<(u32, f64)>,
}

impl CpuSample {
    pub(crate) fn now(origins: &[u32], redis: &[u32]) -> Self {
        let sum = |pids: &[u32]| pids.iter().filter_map(|p| cpu_seconds(*p)).sum::<f64>();
        Self {
            load_generator: cpu_seconds(std::process::id()).unwrap_or(0.0),
            origins: sum(origins),
            redis: sum(redis),
            postgres: pids_named("postgres")
                .into_iter()
                .filter_map(|p| Some((p, cpu_seconds(p)?)))
                .collect(),
        }
    }

    /// What was used between `earlier` and `self`. A `postgres` process that started in between
    /// counts in full; one that ended in between is lost (its CPU cannot be read any more), so
    /// a backend that exits never makes the figure negative.
    pub(crate) fn since(&self, earlier: &Self) -> CpuUse {
        let postgres = self
            .postgres
            .iter()
            .map(|(pid, now)| {
                let before = earlier
                    .postgres
                    .iter()
                    .find(|(p, _)| p == pid)
                    .map_or(0.0, |(_, s)| *s);
                (now - before).max(0.0)
            })
            .sum();
        CpuUse {
            load_generator: self.load_generator - earlier.load_generator,
            origins: self.origins - earlier.origins,
            redis: self.redis - earlier.redis,
            postgres,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_uses_cpu_time_that_grows() {
        // Spins until 0.1 s of CPU time shows (on a loaded machine 300 ms of wall clock can hold
        // less than that), for at most a generous 30 s.
        let before = cpu_seconds(std::process::id()).expect("own stat");
        let spin = std::time::Instant::now();
        let mut x = 0u64;
        let mut after = before;
        while after - before < 0.1 && spin.elapsed() < std::time::Duration::from_secs(30) {
            for _ in 0..1_000_000 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            after = cpu_seconds(std::process::id()).expect("own stat");
        }
        assert!(after - before >= 0.1, "{before} -> {after}");
    }

    #[test]
    fn this_process_is_seen_with_its_memory_descriptors_and_name() {
        let pid = std::process::id();
        assert!(
            rss_bytes(pid).is_some_and(|b| b > 1024 * 1024),
            "{:?}",
            rss_bytes(pid)
        );
        assert!(open_fds(pid).is_some_and(|n| n >= 3), "{:?}", open_fds(pid));
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).expect("comm");
        assert!(pids_named(comm.trim()).contains(&pid));
        assert_eq!(rss_bytes(u32::MAX), None, "a process that does not exist");
        assert!(machine().contains("cores"), "{}", machine());
        assert!(load_average().parse::<f64>().is_ok(), "{}", load_average());
    }

    #[test]
    fn a_postgres_process_that_ends_during_the_run_does_not_count_negative() {
        let sample = |postgres: Vec<(u32, f64)>| CpuSample {
            postgres,
            ..CpuSample::default()
        };
        let before = sample(vec![(10, 5.0), (11, 100.0)]);
        let after = sample(vec![(10, 5.5), (12, 0.25)]);
        let used = after.since(&before).postgres;
        assert!((used - 0.75).abs() < 1e-9, "{used}");
    }
}
