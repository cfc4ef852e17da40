//! Redlock: a distributed lock over N independent Redis masters (placeholder; being written).
