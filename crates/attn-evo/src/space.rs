//! Search spaces: knobs with finite domains, a validity check, and the variation operators.
//!
//! A space is flat (one implementation's knobs, or a `--src` kernel's) or a choice among
//! [`Branch`]es (`--impl a,b,c`): the implementation is then a categorical knob, [`IMPL_KNOB`]
//! (its value the branch's index), with each branch's own knobs beneath it; a branch may have
//! none (`cublas`). Operators only ever return configs that pass [`Space::check`] (the knobs of
//! exactly one branch, each value in its domain, that branch's validator satisfied), so a
//! candidate that cannot be valid is never built.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use attn_evidence::ImplConfig;
pub use attn_evidence::IMPL_KNOB;
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

/// Knobs, their domains and a validator: a flat space, or one branch of a choice.
struct Flat {
    knobs: Vec<KnobDomain>,
    validator: Box<Validator>,
}

impl Flat {
    fn new(
        knobs: Vec<KnobDomain>,
        validator: impl Fn(&Knobs) -> std::result::Result<(), String> + Send + Sync + 'static,
    ) -> Result<Flat> {
        for (i, k) in knobs.iter().enumerate() {
            if knobs[..i].iter().any(|o| o.name == k.name) || k.name == IMPL_KNOB {
                return Err(EvoError::Duplicate {
                    knob: k.name.clone(),
                    what: "the knob".into(),
                });
            }
        }
        Ok(Flat {
            knobs,
            validator: Box::new(validator),
        })
    }

    fn size(&self) -> u64 {
        self.knobs
            .iter()
            .fold(1u64, |n, k| n.saturating_mul(k.values.len() as u64))
    }

    fn domain(&self, name: &str) -> Option<&[i64]> {
        let knob = self.knobs.iter().find(|k| k.name == name);
        knob.map(|k| k.values.as_slice())
    }

    fn fits(&self, name: &str, value: i64) -> bool {
        self.domain(name).is_some_and(|d| d.contains(&value))
    }

    fn check(&self, knobs: &Knobs) -> std::result::Result<(), String> {
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

    fn random(&self, rng: &mut impl Rng) -> Option<Knobs> {
        (0..ATTEMPTS)
            .map(|_| self.any(rng))
            .find(|k| self.check(k).is_ok())
    }

    /// The knobs a mutation may change (those with more than one value).
    fn movable(&self) -> Vec<&KnobDomain> {
        self.knobs.iter().filter(|k| k.values.len() > 1).collect()
    }

    /// `parent` with `knob` changed to another of its values: one draw, valid or not.
    fn change(knob: &KnobDomain, parent: &Knobs, rng: &mut impl Rng) -> Knobs {
        let current = parent.get(&knob.name).copied();
        let others: Vec<i64> = knob
            .values
            .iter()
            .copied()
            .filter(|v| Some(*v) != current)
            .collect();
        let mut child = parent.clone();
        child.insert(knob.name.clone(), others[rng.random_range(0..others.len())]);
        child
    }

    fn mutate(&self, parent: &Knobs, rng: &mut impl Rng) -> Option<Knobs> {
        let movable = self.movable();
        if movable.is_empty() {
            return None;
        }
        (0..ATTEMPTS).find_map(|_| {
            let knob = movable[rng.random_range(0..movable.len())];
            let child = Flat::change(knob, parent, rng);
            self.check(&child).is_ok().then_some(child)
        })
    }

    fn crossover(&self, a: &Knobs, b: &Knobs, rng: &mut impl Rng) -> Option<Knobs> {
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

    fn project(&self, partial: &Knobs, fill: &Knobs) -> Option<Knobs> {
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

/// One implementation of a choice space: its name, knobs (possibly none), validator and
/// per-shape defaults (what a config switched to it takes for the knobs its parent lacks).
pub struct Branch {
    name: String,
    flat: Flat,
    defaults: Knobs,
}

impl fmt::Debug for Branch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Branch")
            .field("name", &self.name)
            .field("knobs", &self.flat.knobs)
            .field("defaults", &self.defaults)
            .finish_non_exhaustive()
    }
}

impl Branch {
    /// The implementation `name` with `knobs` (none is fine), whose configs must also pass
    /// `validator`, and its `defaults` for the problem searched.
    pub fn new(
        name: impl Into<String>,
        knobs: Vec<KnobDomain>,
        validator: impl Fn(&Knobs) -> std::result::Result<(), String> + Send + Sync + 'static,
        defaults: Knobs,
    ) -> Result<Branch> {
        Ok(Branch {
            name: name.into(),
            flat: Flat::new(knobs, validator)?,
            defaults,
        })
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its knobs, in declaration order (empty for an implementation without knobs).
    pub fn knobs(&self) -> &[KnobDomain] {
        &self.flat.knobs
    }

    /// `parent`'s knobs carried over where this branch has the name and the value fits, then its
    /// defaults where they fit, then (for a knob neither fills) a random value: one draw.
    fn carry_over(&self, parent: &Knobs, rng: &mut impl Rng) -> Knobs {
        self.flat
            .knobs
            .iter()
            .map(|k| {
                let fits = |v: &&i64| k.values.contains(v);
                let value = parent.get(&k.name).filter(fits);
                let value = value.or_else(|| self.defaults.get(&k.name).filter(fits));
                let value = value.copied();
                let value = value.unwrap_or_else(|| k.values[rng.random_range(0..k.values.len())]);
                (k.name.clone(), value)
            })
            .collect()
    }
}

/// The two forms of a space.
enum Form {
    Flat(Flat),
    Choice(Vec<Branch>),
}

/// A search space: knobs, their domains, and the constraints a config must meet; flat, or a
/// choice among implementations ([`Space::choice`]).
pub struct Space {
    form: Form,
}

impl fmt::Debug for Space {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = f.debug_struct("Space");
        match &self.form {
            Form::Flat(flat) => out.field("knobs", &flat.knobs),
            Form::Choice(branches) => out.field("branches", branches),
        };
        out.finish_non_exhaustive()
    }
}

/// A choice config split: its branch's index and its knobs without [`IMPL_KNOB`].
fn split(knobs: &Knobs) -> Option<(usize, Knobs)> {
    let index = usize::try_from(*knobs.get(IMPL_KNOB)?).ok()?;
    let mut rest = knobs.clone();
    rest.remove(IMPL_KNOB);
    Some((index, rest))
}

/// A branch's knobs with [`IMPL_KNOB`] set to its index.
pub(crate) fn join(index: usize, mut knobs: Knobs) -> Knobs {
    knobs.insert(IMPL_KNOB.to_string(), index as i64);
    knobs
}

/// The branch a choice config picks and its own knobs, or why it picks none.
fn branch_of<'s>(
    branches: &'s [Branch],
    knobs: &Knobs,
) -> std::result::Result<(usize, &'s Branch, Knobs), String> {
    let Some(value) = knobs.get(IMPL_KNOB) else {
        return Err(format!("{IMPL_KNOB} is not set"));
    };
    match split(knobs) {
        Some((i, rest)) if i < branches.len() => Ok((i, &branches[i], rest)),
        _ => Err(format!(
            "{IMPL_KNOB}={value} is not an implementation of this search (0..{})",
            branches.len()
        )),
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
        Ok(Space {
            form: Form::Flat(Flat::new(knobs, validator)?),
        })
    }

    /// A space with no constraint beyond the domains.
    pub fn unconstrained(knobs: Vec<KnobDomain>) -> Result<Space> {
        Space::new(knobs, |_| Ok(()))
    }

    /// A choice among `branches` (implementations, in order; at least one, names distinct): a
    /// config sets [`IMPL_KNOB`] to a branch's index and exactly that branch's knobs.
    ///
    /// ```
    /// use attn_evo::{Branch, KnobDomain, Space, IMPL_KNOB};
    /// let tiles = Branch::new("tiles", vec![KnobDomain::new("BLOCK_M", vec![64, 128])?], |_| Ok(()), [("BLOCK_M".to_string(), 64)].into())?;
    /// let library = Branch::new("library", vec![], |_| Ok(()), Default::default())?;
    /// let space = Space::choice(vec![tiles, library])?;
    /// assert_eq!(space.size(), 3);
    /// let library_config = [(IMPL_KNOB.to_string(), 1)].into();
    /// assert!(space.check(&library_config).is_ok());
    /// assert_eq!(space.describe(&library_config), "library");
    /// # Ok::<(), attn_evo::EvoError>(())
    /// ```
    pub fn choice(branches: Vec<Branch>) -> Result<Space> {
        if branches.is_empty() {
            return Err(EvoError::NoKnobs);
        }
        for (i, b) in branches.iter().enumerate() {
            if branches[..i].iter().any(|o| o.name == b.name) {
                return Err(EvoError::Duplicate {
                    knob: IMPL_KNOB.into(),
                    what: format!("implementation {}", b.name),
                });
            }
        }
        Ok(Space {
            form: Form::Choice(branches),
        })
    }

    /// The knobs of a flat space, in declaration order; empty for a choice space (see
    /// [`Space::branches`]).
    pub fn knobs(&self) -> &[KnobDomain] {
        match &self.form {
            Form::Flat(flat) => &flat.knobs,
            Form::Choice(_) => &[],
        }
    }

    /// The branches of a choice space, in order; empty for a flat space.
    pub fn branches(&self) -> &[Branch] {
        match &self.form {
            Form::Flat(_) => &[],
            Form::Choice(branches) => branches,
        }
    }

    /// The index of the branch called `name`, in a choice space.
    pub fn branch_index(&self, name: &str) -> Option<usize> {
        self.branches().iter().position(|b| b.name == name)
    }

    /// The config columns a log of this space has: the knobs' names, sorted; for a choice space
    /// every branch's knobs and [`IMPL_KNOB`], the implementation's column (its rows' typed
    /// `implementation`).
    pub fn columns(&self) -> Vec<String> {
        let names: BTreeSet<&str> = match &self.form {
            Form::Flat(flat) => flat.knobs.iter().map(|k| k.name.as_str()).collect(),
            Form::Choice(branches) => branches
                .iter()
                .flat_map(|b| b.flat.knobs.iter().map(|k| k.name.as_str()))
                .chain([IMPL_KNOB])
                .collect(),
        };
        names.into_iter().map(str::to_owned).collect()
    }

    /// The number of configs, valid or not (saturating); a choice space's is the sum of its
    /// branches'.
    pub fn size(&self) -> u64 {
        match &self.form {
            Form::Flat(flat) => flat.size(),
            Form::Choice(branches) => branches
                .iter()
                .fold(0u64, |n, b| n.saturating_add(b.flat.size())),
        }
    }

    /// Checks that `knobs` sets exactly this space's knobs (a choice space: [`IMPL_KNOB`] and
    /// its branch's), each within its domain, and passes the validator; the reason otherwise.
    pub fn check(&self, knobs: &Knobs) -> std::result::Result<(), String> {
        match &self.form {
            Form::Flat(flat) => flat.check(knobs),
            Form::Choice(branches) => {
                let (_, branch, rest) = branch_of(branches, knobs)?;
                branch
                    .flat
                    .check(&rest)
                    .map_err(|why| format!("{}: {why}", branch.name))
            }
        }
    }

    /// A random valid config (a choice space: of a branch drawn uniformly), or `None` when none
    /// was found in a bounded number of draws.
    pub fn random(&self, rng: &mut impl Rng) -> Option<Knobs> {
        match &self.form {
            Form::Flat(flat) => flat.random(rng),
            Form::Choice(branches) => (0..2 * branches.len()).find_map(|_| {
                let i = rng.random_range(0..branches.len());
                branches[i].flat.random(rng).map(|k| join(i, k))
            }),
        }
    }

    /// `parent` with one knob changed to another value of its domain, valid; `None` when no
    /// valid single-knob change was found. In a choice space the implementation is one of the
    /// knobs: changing it carries the parent's knobs over to the new implementation where names
    /// and values fit, fills the rest from its defaults (a random valid config of it when that is
    /// invalid).
    pub fn mutate(&self, parent: &Knobs, rng: &mut impl Rng) -> Option<Knobs> {
        let branches = match &self.form {
            Form::Flat(flat) => return flat.mutate(parent, rng),
            Form::Choice(branches) => branches,
        };
        let (index, branch, rest) = branch_of(branches, parent).ok()?;
        let movable = branch.flat.movable();
        let switchable = branches.len() > 1;
        let choices = movable.len() + usize::from(switchable);
        if choices == 0 {
            return None;
        }
        (0..ATTEMPTS).find_map(|_| {
            let pick = rng.random_range(0..choices);
            if pick < movable.len() {
                let child = Flat::change(movable[pick], &rest, rng);
                return branch
                    .flat
                    .check(&child)
                    .is_ok()
                    .then(|| join(index, child));
            }
            let to = (index + 1 + rng.random_range(0..branches.len() - 1)) % branches.len();
            let target = &branches[to];
            let carried = target.carry_over(&rest, rng);
            let child = match target.flat.check(&carried) {
                Ok(()) => Some(carried),
                Err(_) => target.flat.random(rng),
            };
            child.map(|k| join(to, k))
        })
    }

    /// Uniform crossover: each knob from one parent or the other, valid; `None` when no valid mix
    /// was found. Parents of different implementations give a child of one of the two (drawn
    /// evenly), whose knobs come from either parent where the other's name and value fit it.
    pub fn crossover(&self, a: &Knobs, b: &Knobs, rng: &mut impl Rng) -> Option<Knobs> {
        let branches = match &self.form {
            Form::Flat(flat) => return flat.crossover(a, b, rng),
            Form::Choice(branches) => branches,
        };
        let (ia, _, ka) = branch_of(branches, a).ok()?;
        let (ib, _, kb) = branch_of(branches, b).ok()?;
        let (index, kept, other) = if ia == ib || rng.random_bool(0.5) {
            (ia, ka, kb)
        } else {
            (ib, kb, ka)
        };
        let flat = &branches[index].flat;
        // Where the other parent's value does not fit, both draws give the kept parent's.
        let other: Knobs = other
            .into_iter()
            .filter(|(k, v)| flat.fits(k, *v))
            .collect();
        let other = kept
            .iter()
            .map(|(k, v)| (k.clone(), other.get(k).copied().unwrap_or(*v)))
            .collect();
        flat.crossover(&kept, &other, rng).map(|k| join(index, k))
    }

    /// A config of this space from a partial one (e.g. a micro-benchmark's tile config): the knobs
    /// `partial` names take its values, the others those of `fill` (a choice space: then the
    /// branch's defaults; `partial` must name its branch with [`IMPL_KNOB`]). `None` if the result
    /// is invalid.
    pub fn project(&self, partial: &Knobs, fill: &Knobs) -> Option<Knobs> {
        match &self.form {
            Form::Flat(flat) => flat.project(partial, fill),
            Form::Choice(branches) => {
                let (index, branch, rest) = branch_of(branches, partial).ok()?;
                let fill: Knobs = branch
                    .defaults
                    .iter()
                    .chain(fill)
                    .map(|(k, v)| (k.clone(), *v))
                    .collect();
                branch.flat.project(&rest, &fill).map(|k| join(index, k))
            }
        }
    }

    /// Every config `partial` seeds ([`Space::project`]): one for a flat space or a `partial`
    /// that names its branch; otherwise one per branch that has any of `partial`'s knobs.
    pub fn projections(&self, partial: &Knobs, fill: &Knobs) -> Vec<Knobs> {
        if partial.contains_key(IMPL_KNOB) || self.branches().is_empty() {
            return self.project(partial, fill).into_iter().collect();
        }
        (0..self.branches().len())
            .filter(|&i| {
                let branch = &self.branches()[i];
                partial.keys().any(|k| branch.flat.domain(k).is_some())
            })
            .filter_map(|i| self.project(&join(i, partial.clone()), fill))
            .collect()
    }

    /// Each branch's defaults (a knob whose default is outside its domain, narrowed by `--knob`:
    /// the domain's first value), valid ones, in branch order: a choice search's first seeds.
    /// Empty for a flat space.
    pub fn defaults(&self) -> Vec<Knobs> {
        let seeds = self.branches().iter().enumerate().map(|(i, branch)| {
            let own: Knobs = branch
                .flat
                .knobs
                .iter()
                .map(|k| {
                    let default = branch.defaults.get(&k.name).copied();
                    let value = default.filter(|v| k.values.contains(v));
                    (k.name.clone(), value.unwrap_or(k.values[0]))
                })
                .collect();
            join(i, own)
        });
        seeds.filter(|k| self.check(k).is_ok()).collect()
    }

    /// A config as a log row holds it: in a choice space, the implementation by name (the
    /// branch its [`IMPL_KNOB`] picks) and that branch's knobs; a flat space's has no
    /// implementation.
    pub fn to_row(&self, knobs: &Knobs) -> ImplConfig {
        let chosen =
            split(knobs).and_then(|(i, rest)| Some((self.branches().get(i)?.name.clone(), rest)));
        match chosen {
            Some((name, rest)) => ImplConfig {
                implementation: Some(name),
                knobs: rest,
            },
            None => ImplConfig {
                implementation: None,
                knobs: knobs.clone(),
            },
        }
    }

    /// A log row's config back as knobs ([`Space::to_row`]'s inverse); why not, for an
    /// implementation this space does not have.
    pub fn from_row(&self, config: &ImplConfig) -> std::result::Result<Knobs, String> {
        let Some(name) = &config.implementation else {
            return Ok(config.knobs.clone());
        };
        let index = self.branch_index(name).ok_or_else(|| {
            format!("{IMPL_KNOB} = {name:?} is not an implementation of this search")
        })?;
        Ok(join(index, config.knobs.clone()))
    }

    /// A config on one line: `K=V,K=V`, after its implementation's name in a choice space
    /// (`mma BLOCK_M=64,...`, or just `cublas`).
    pub fn describe(&self, knobs: &Knobs) -> String {
        self.to_row(knobs).describe()
    }
}
