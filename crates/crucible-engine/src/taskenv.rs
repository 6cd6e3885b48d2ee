//! The environment a task's process starts from: built here and nowhere else, since `proc`
//! clears the engine's own (ARCHITECTURE.md: "an environment built from an allowlist").
//!
//! Today that is the engine's whole environment with the task contract (`CRUCIBLE_TASK`,
//! `CRUCIBLE_INPUTS`, ...) over it, as before the spawn seam: issue 11's allowlist replaces it
//! here (docs/decisions.md, "Task environment").

/// The environment of a task process: the engine's (valid Unicode only), then `contract`.
pub fn for_task(contract: &[(String, String)]) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| !contract.iter().any(|(c, _)| c == k))
        .collect();
    env.extend(contract.iter().cloned());
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_contract_comes_last_and_once() {
        let contract = vec![("CRUCIBLE_TASK".to_string(), "t".to_string())];
        let env = for_task(&contract);
        assert_eq!(env.last(), contract.last());
        assert_eq!(env.iter().filter(|(k, _)| k == "CRUCIBLE_TASK").count(), 1);
    }
}
