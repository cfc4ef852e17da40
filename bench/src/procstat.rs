//! What a process holds and uses, read from `/proc` (Linux): resident memory, open file
//! descriptors and CPU time.

/// Resident set size in bytes (`VmRSS` of `/proc/<pid>/status`); `None` if the process is gone.
pub(crate) fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// Open file descriptors (entries of `/proc/<pid>/fd`); `None` if the process is gone.
pub(crate) fn open_fds(pid: u32) -> Option<usize> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count())
}

/// One line describing this machine: CPU model, cores, memory.
pub(crate) fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0 / 1024.0);
    format!("{cpu}, {cores} cores, {mem_gib:.0} GiB")
}

/// The 1-minute load average.
pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

/// Clock ticks per second of `/proc/<pid>/stat` (`USER_HZ`: 100 on every Linux ABI we run on).
const USER_HZ: f64 = 100.0;

/// CPU time (user + system) the process has used so far, in seconds; `None` if it is gone.
pub(crate) fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; the fields after it follow its ')'.
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    let mut fields = rest.split_whitespace().skip(11); // field 14 (utime) is the 12th after ')'
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / USER_HZ)
}

/// Processes whose command name (`/proc/<pid>/comm`) is `name`.
pub(crate) fn pids_named(name: &str) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == name)
        })
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
