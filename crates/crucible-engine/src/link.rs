//! An engine outside the controller (a Kubernetes Job's pod, a `plan run` elsewhere) linked to
//! the controller that recorded its run: the controller's URL, its id of the run and the run's
//! token, handed to the engine in its environment (docs/controller.md, "Engines outside the
//! controller"). With them the engine answers its human routes and gates through the
//! controller's decisions polling protocol ([`crate::decision::controller`]) and reports its
//! session log to the controller ([`crate::link::Reporter`]); every exchange is a request the
//! engine initiates. The token is one of the engine's own `CRUCIBLE_*` settings: no task
//! receives it ([`crate::taskenv`]).

/// The controller's base URL as the engine reaches it.
pub const CONTROLLER_URL_ENV: &str = "CRUCIBLE_CONTROLLER_URL";
/// The controller's id of the run.
pub const CONTROLLER_RUN_ENV: &str = "CRUCIBLE_CONTROLLER_RUN";
/// The bearer token scoped to that run.
pub const RUN_TOKEN_ENV: &str = "CRUCIBLE_RUN_TOKEN";

/// The link to the controller, as the environment gives it.
#[derive(Clone)]
pub struct Link {
    /// Without a trailing slash.
    pub url: String,
    pub run: String,
    pub token: String,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("url", &self.url)
            .field("run", &self.run)
            .finish_non_exhaustive()
    }
}

impl Link {
    /// The link in `get`'s variables: `None` when none of the three is set, an error naming
    /// what is missing or malformed when only some are.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Option<Link>, String> {
        let vars = [CONTROLLER_URL_ENV, CONTROLLER_RUN_ENV, RUN_TOKEN_ENV].map(|n| (n, get(n)));
        if vars.iter().all(|(_, v)| v.is_none()) {
            return Ok(None);
        }
        let missing: Vec<&str> = vars
            .iter()
            .filter(|(_, v)| v.as_deref().is_none_or(|v| v.trim().is_empty()))
            .map(|(n, _)| *n)
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "the link to a controller needs {CONTROLLER_URL_ENV}, {CONTROLLER_RUN_ENV} and {RUN_TOKEN_ENV}: {} not set",
                missing.join(", ")
            ));
        }
        let [(_, Some(url)), (_, Some(run)), (_, Some(token))] = vars else {
            unreachable!("each was checked set");
        };
        let url = url.trim().trim_end_matches('/').to_string();
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!(
                "{CONTROLLER_URL_ENV}: {url:?} is not an http(s) URL"
            ));
        }
        let run = run.trim().to_string();
        if !run
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(format!("{CONTROLLER_RUN_ENV}: {run:?} is not a run id"));
        }
        Ok(Some(Link {
            url,
            run,
            token: token.trim().to_string(),
        }))
    }

    /// The link in the process environment.
    pub fn from_env() -> Result<Option<Link>, String> {
        Link::from_vars(|n| std::env::var(n).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars<'a>(set: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |n| {
            set.iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn all_three_or_none() {
        assert!(Link::from_vars(vars(&[])).unwrap().is_none());
        let err = Link::from_vars(vars(&[(CONTROLLER_URL_ENV, "http://c")])).unwrap_err();
        assert!(
            err.contains("CRUCIBLE_CONTROLLER_RUN, CRUCIBLE_RUN_TOKEN not set"),
            "{err}"
        );
        let link = Link::from_vars(vars(&[
            (CONTROLLER_URL_ENV, "http://c:1/"),
            (CONTROLLER_RUN_ENV, "0192-ab"),
            (RUN_TOKEN_ENV, "cru_x"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            (link.url.as_str(), link.run.as_str()),
            ("http://c:1", "0192-ab")
        );
        assert!(
            !format!("{link:?}").contains("cru_x"),
            "the token is never printed"
        );
        let err = Link::from_vars(vars(&[
            (CONTROLLER_URL_ENV, "http://c"),
            (CONTROLLER_RUN_ENV, "../x"),
            (RUN_TOKEN_ENV, "t"),
        ]))
        .unwrap_err();
        assert!(err.contains("is not a run id"), "{err}");
    }
}
