//! A shared retry budget with gRPC's `retryThrottling` semantics, kept per origin.
//!
//! Each origin has a token count that starts full at `max_tokens`. Every failed attempt
//! (a transient failure) takes one token (not below 0); every success gives back
//! `token_ratio` (not above `max_tokens`). A *retry* is allowed only while the count is above
//! `max_tokens / 2`; a first attempt is never blocked. When a service is down, the budget
//! drains in a few failures and every caller sharing it stops retrying, so an outage costs
//! about one request per call instead of `1 + retries` (seed 002: "unlimited retries make a
//! flood; keep a retry budget").

use super::options::OptionError;
use super::origins::OriginMap;

/// Budget settings.
///
/// # Default
/// `max_tokens` 10, `token_ratio` 0.1 (gRPC's example values).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BudgetConfig {
    /// Tokens per origin when full; retries stop at half of it. Default 10.
    pub max_tokens: f64,
    /// Tokens a success gives back. Default 0.1.
    pub token_ratio: f64,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        BudgetConfig { max_tokens: 10.0, token_ratio: 0.1 }
    }
}

impl BudgetConfig {
    /// `maxTokens` must be a finite number in `(0, 1000000]`; `tokenRatio` a finite number in
    /// `(0, maxTokens]`.
    pub fn validate(self) -> Result<Self, OptionError> {
        if !(self.max_tokens.is_finite() && self.max_tokens > 0.0 && self.max_tokens <= 1_000_000.0) {
            return Err(OptionError::new("maxTokens", "a number > 0 and <= 1000000"));
        }
        if !(self.token_ratio.is_finite() && self.token_ratio > 0.0 && self.token_ratio <= self.max_tokens) {
            return Err(OptionError::new("tokenRatio", "a number > 0 and <= maxTokens"));
        }
        Ok(self)
    }
}

/// The token counts of every origin seen.
#[derive(Clone, Debug, Default)]
pub struct RetryBudget {
    config: BudgetConfig,
    tokens: OriginMap<f64>,
}

impl RetryBudget {
    /// A budget with `config` (already validated).
    pub fn new(config: BudgetConfig) -> Self {
        RetryBudget { config, tokens: OriginMap::default() }
    }

    /// The settings.
    pub fn config(&self) -> BudgetConfig {
        self.config
    }

    /// The token count of `origin` (full when never seen).
    pub fn tokens(&self, origin: &str) -> f64 {
        self.tokens.get(origin).copied().unwrap_or(self.config.max_tokens)
    }

    fn update(&mut self, origin: &str, f: impl FnOnce(f64) -> f64) {
        let max = self.config.max_tokens;
        let t = self.tokens.get_or_insert_with(origin, || max);
        *t = f(*t).clamp(0.0, max);
    }

    /// A transient failure at `origin`: one token less.
    pub fn record_failure(&mut self, origin: &str) {
        self.update(origin, |t| t - 1.0);
    }

    /// A success at `origin`: `token_ratio` tokens more.
    pub fn record_success(&mut self, origin: &str) {
        let ratio = self.config.token_ratio;
        self.update(origin, |t| t + ratio);
    }

    /// May a call to `origin` retry now? (Tokens above half of `max_tokens`.)
    pub fn allows_retry(&self, origin: &str) -> bool {
        self.tokens(origin) > self.config.max_tokens / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const O: &str = "https://api.example:443";

    #[test]
    fn starts_full_and_stops_retries_at_half() {
        let mut b = RetryBudget::new(BudgetConfig::default());
        assert_eq!(b.tokens(O), 10.0);
        assert!(b.allows_retry(O));
        for _ in 0..4 {
            b.record_failure(O);
        }
        assert_eq!(b.tokens(O), 6.0);
        assert!(b.allows_retry(O));
        b.record_failure(O);
        assert_eq!(b.tokens(O), 5.0);
        assert!(!b.allows_retry(O), "5 is not above 10 / 2");
    }

    #[test]
    fn successes_refill_by_the_ratio_up_to_max() {
        let mut b = RetryBudget::new(BudgetConfig::default());
        for _ in 0..5 {
            b.record_failure(O);
        }
        for _ in 0..10 {
            b.record_success(O);
        }
        assert!((b.tokens(O) - 6.0).abs() < 1e-9);
        assert!(b.allows_retry(O));
        for _ in 0..1000 {
            b.record_success(O);
        }
        assert_eq!(b.tokens(O), 10.0);
    }

    #[test]
    fn never_below_zero_and_origins_are_separate() {
        let mut b = RetryBudget::new(BudgetConfig::default());
        for _ in 0..100 {
            b.record_failure(O);
        }
        assert_eq!(b.tokens(O), 0.0);
        assert_eq!(b.tokens("http://other:80"), 10.0);
        assert!(b.allows_retry("http://other:80"));
    }

    #[test]
    fn validation() {
        assert!(BudgetConfig { max_tokens: 0.0, token_ratio: 0.1 }.validate().is_err());
        assert!(BudgetConfig { max_tokens: f64::NAN, token_ratio: 0.1 }.validate().is_err());
        assert!(BudgetConfig { max_tokens: 10.0, token_ratio: 0.0 }.validate().is_err());
        assert!(BudgetConfig { max_tokens: 10.0, token_ratio: 11.0 }.validate().is_err());
        assert_eq!(BudgetConfig::default().validate(), Ok(BudgetConfig::default()));
    }
}
