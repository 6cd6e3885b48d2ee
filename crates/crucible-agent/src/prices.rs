//! What model tokens cost, for harnesses whose stream reports tokens but no money (codex, pi):
//! USD per million tokens, by model. The operator's `[agent.prices.<model>]` comes first, then
//! the defaults below; a model in neither is priced at [`UNKNOWN`], on the high side, so an
//! unpriced model reaches the cost ceiling early rather than late (docs/agents.md).

use std::collections::BTreeMap;

/// USD per million tokens.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Price {
    pub input: f64,
    pub cached_input: f64,
    pub output: f64,
}

impl Price {
    /// What `input` (of which `cached` were cache reads) and `output` tokens cost.
    pub fn cost(&self, input: u64, cached: u64, output: u64) -> f64 {
        let fresh = input.saturating_sub(cached) as f64;
        (fresh * self.input + cached as f64 * self.cached_input + output as f64 * self.output) / 1e6
    }
}

/// The defaults, by model name.
pub const DEFAULTS: &[(&str, Price)] = &[
    (
        "gpt-5.5",
        Price {
            input: 1.25,
            cached_input: 0.125,
            output: 10.0,
        },
    ),
    (
        "gpt-5",
        Price {
            input: 1.25,
            cached_input: 0.125,
            output: 10.0,
        },
    ),
    (
        "gpt-5-mini",
        Price {
            input: 0.25,
            cached_input: 0.025,
            output: 2.0,
        },
    ),
    (
        "claude-sonnet-4-5",
        Price {
            input: 3.0,
            cached_input: 0.3,
            output: 15.0,
        },
    ),
    (
        "claude-haiku-4-5",
        Price {
            input: 1.0,
            cached_input: 0.1,
            output: 5.0,
        },
    ),
    (
        "claude-opus-4-1",
        Price {
            input: 15.0,
            cached_input: 1.5,
            output: 75.0,
        },
    ),
];

/// The price of a model in no table.
pub const UNKNOWN: Price = Price {
    input: 15.0,
    cached_input: 1.5,
    output: 75.0,
};

/// A run's price table: the operator's entries over the defaults.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Prices {
    pub overrides: BTreeMap<String, Price>,
}

impl Prices {
    /// The price of `model`, and where it came from.
    pub fn source(&self, model: &str) -> (Price, &'static str) {
        if let Some(p) = self.overrides.get(model) {
            return (*p, "[agent.prices]");
        }
        match DEFAULTS.iter().find(|(m, _)| *m == model) {
            Some((_, p)) => (*p, "default"),
            None => (UNKNOWN, "unknown model: the high default"),
        }
    }

    pub fn of(&self, model: &str) -> Price {
        self.source(model).0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_then_defaults_then_the_high_default() {
        let mut p = Prices::default();
        assert_eq!(p.of("gpt-5.5").output, 10.0);
        assert_eq!(p.of("no-such-model"), UNKNOWN);
        let mine = Price {
            input: 1.0,
            cached_input: 0.0,
            output: 2.0,
        };
        p.overrides.insert("gpt-5.5".into(), mine);
        assert_eq!(p.source("gpt-5.5"), (mine, "[agent.prices]"));
        assert_eq!(mine.cost(1_000_000, 0, 500_000), 2.0);
        assert_eq!(UNKNOWN.cost(1000, 1000, 0), 0.0015);
    }
}
