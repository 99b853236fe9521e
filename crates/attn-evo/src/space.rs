//! Search spaces: knobs with finite domains, a validity check, and the variation operators.
//!
//! Operators only ever return configs that pass [`Space::check`] (every knob present, each value
//! in its domain, the validator satisfied), so a candidate that cannot be valid is never built.

use std::collections::BTreeMap;
use std::fmt;

use rand::Rng;

use crate::error::{EvoError, Result};

/// A config: a value for each knob, by name (the same shape as `attn_kernels::Config`).
pub type Knobs = BTreeMap<String, i64>;

/// How many draws an operator makes before it gives up on finding a valid config.
const ATTEMPTS: usize = 64;

/// One knob and the values it may take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnobDomain {
    /// The knob's name, e.g. `BLOCK_M`.
    pub name: String,
    /// Its values, in declaration order, without duplicates.
    pub values: Vec<i64>,
}

impl KnobDomain {
    /// A knob with its values; errors on an empty domain or a repeated value.
    pub fn new(name: impl Into<String>, values: Vec<i64>) -> Result<KnobDomain> {
        let name = name.into();
        if values.is_empty() {
            return Err(EvoError::EmptyDomain { knob: name });
        }
        for (i, v) in values.iter().enumerate() {
            if values[..i].contains(v) {
                return Err(EvoError::Duplicate {
                    knob: name,
                    what: format!("value {v}"),
                });
            }
        }
        Ok(KnobDomain { name, values })
    }

    /// Parses `NAME=v1,v2,...` (the name is upper-cased), as given to `--knob`.
    ///
    /// ```
    /// let knob = attn_evo::KnobDomain::parse("mode=0,1,2")?;
    /// assert_eq!((knob.name.as_str(), knob.values), ("MODE", vec![0, 1, 2]));
    /// # Ok::<(), attn_evo::EvoError>(())
    /// ```
    pub fn parse(text: &str) -> Result<KnobDomain> {
        let fail = |reason: &str| EvoError::KnobSyntax {
            text: text.to_string(),
            reason: reason.to_string(),
        };
        let (name, values) = text.split_once('=').ok_or_else(|| fail("no `=`"))?;
        let name = name.trim().to_ascii_uppercase();
        if name.is_empty() {
            return Err(fail("empty name"));
        }
        let values = values
            .split(',')
            .map(|v| v.trim().parse::<i64>())
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|_| fail("values must be integers"))?;
        KnobDomain::new(name, values)
    }
}

type Validator = dyn Fn(&Knobs) -> std::result::Result<(), String> + Send + Sync;

/// A search space: knobs, their domains, and the constraints a config must meet.
pub struct Space {
    knobs: Vec<KnobDomain>,
    validator: Box<Validator>,
}

impl fmt::Debug for Space {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Space")
            .field("knobs", &self.knobs)
            .finish_non_exhaustive()
    }
}

impl Space {
    /// A space over `knobs` whose configs must also pass `validator` (for a registered kernel:
    /// the registry's `resolve`, i.e. its constraints and the device limits).
    pub fn new(
        knobs: Vec<KnobDomain>,
        validator: impl Fn(&Knobs) -> std::result::Result<(), String> + Send + Sync + 'static,
    ) -> Result<Space> {
        if knobs.is_empty() {
            return Err(EvoError::NoKnobs);
        }
        for (i, k) in knobs.iter().enumerate() {
            if knobs[..i].iter().any(|o| o.name == k.name) {
                return Err(EvoError::Duplicate {
                    knob: k.name.clone(),
                    what: "the knob".into(),
                });
            }
        }
        Ok(Space {
            knobs,
            validator: Box::new(validator),
        })
    }

    /// A space with no constraint beyond the domains.
    pub fn unconstrained(knobs: Vec<KnobDomain>) -> Result<Space> {
        Space::new(knobs, |_| Ok(()))
    }

    /// The knobs, in declaration order.
    pub fn knobs(&self) -> &[KnobDomain] {
        &self.knobs
    }

    /// The number of configs, valid or not (saturating).
    pub fn size(&self) -> u64 {
        self.knobs
            .iter()
            .fold(1u64, |n, k| n.saturating_mul(k.values.len() as u64))
    }

    /// Checks that `knobs` sets exactly this space's knobs, each within its domain, and passes
    /// the validator; the reason otherwise.
    pub fn check(&self, knobs: &Knobs) -> std::result::Result<(), String> {
        if let Some(extra) = knobs
            .keys()
            .find(|name| !self.knobs.iter().any(|k| &k.name == *name))
        {
            return Err(format!("unknown knob {extra}"));
        }
        for k in &self.knobs {
            match knobs.get(&k.name) {
                None => return Err(format!("{} is not set", k.name)),
                Some(v) if !k.values.contains(v) => {
                    return Err(format!(
                        "{}={v} is outside its domain {:?}",
                        k.name, k.values
                    ))
                }
                Some(_) => {}
            }
        }
        (self.validator)(knobs)
    }

    /// A uniformly random config (valid or not).
    fn any(&self, rng: &mut impl Rng) -> Knobs {
        self.knobs
            .iter()
            .map(|k| {
                (
                    k.name.clone(),
                    k.values[rng.random_range(0..k.values.len())],
                )
            })
            .collect()
    }

    /// A random valid config, or `None` when none was found in a bounded number of draws.
    pub fn random(&self, rng: &mut impl Rng) -> Option<Knobs> {
        (0..ATTEMPTS)
            .map(|_| self.any(rng))
            .find(|k| self.check(k).is_ok())
    }

    /// `parent` with one knob changed to another value of its domain, valid; `None` when no
    /// valid single-knob change was found.
    pub fn mutate(&self, parent: &Knobs, rng: &mut impl Rng) -> Option<Knobs> {
        let movable: Vec<&KnobDomain> = self.knobs.iter().filter(|k| k.values.len() > 1).collect();
        if movable.is_empty() {
            return None;
        }
        (0..ATTEMPTS).find_map(|_| {
            let knob = movable[rng.random_range(0..movable.len())];
            let current = parent.get(&knob.name).copied();
            let others: Vec<i64> = knob
                .values
                .iter()
                .copied()
                .filter(|v| Some(*v) != current)
                .collect();
            let mut child = parent.clone();
            child.insert(knob.name.clone(), others[rng.random_range(0..others.len())]);
            self.check(&child).is_ok().then_some(child)
        })
    }

    /// Uniform crossover: each knob from one parent or the other, valid; `None` when no valid mix
    /// was found.
    pub fn crossover(&self, a: &Knobs, b: &Knobs, rng: &mut impl Rng) -> Option<Knobs> {
        (0..ATTEMPTS).find_map(|_| {
            let child: Knobs = self
                .knobs
                .iter()
                .filter_map(|k| {
                    let from = if rng.random_bool(0.5) { a } else { b };
                    from.get(&k.name).map(|v| (k.name.clone(), *v))
                })
                .collect();
            self.check(&child).is_ok().then_some(child)
        })
    }

    /// A config of this space from a partial one (e.g. a micro-benchmark's tile config): the knobs
    /// `partial` names take its values, the others those of `fill`. `None` if the result is
    /// invalid.
    pub fn project(&self, partial: &Knobs, fill: &Knobs) -> Option<Knobs> {
        let knobs: Knobs = self
            .knobs
            .iter()
            .filter_map(|k| {
                partial
                    .get(&k.name)
                    .or_else(|| fill.get(&k.name))
                    .map(|v| (k.name.clone(), *v))
            })
            .collect();
        self.check(&knobs).is_ok().then_some(knobs)
    }
}
