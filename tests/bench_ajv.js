// bench_ajv.js - times ajv on the files written by `bench-schema --dump DIR`.
//
// usage: node tests/bench_ajv.js DIR [--npm NPM_DIR] [--secs S] [--formats]
//   NPM_DIR: where `npm install --prefix NPM_DIR ajv@8 ajv-formats@3` put
//            its node_modules (default: env AJV_NPM_DIR, else build/npm).
//   --secs:  seconds per timed case (default 1; compile gets half).
//   --formats: `format` is an assertion (ajv-formats); by default it is an
//            annotation (validateFormats: false), like Retort's default.
//
// Uses ajv/dist/2020 on DIR/schema.json (draft 2020-12).  Prints one JSON line:
//   {"ok":true,"version":..,"compile_us":..,"valid_ns":..,"valid_per_s":..,
//    "invalid_ns":..,"invalid_per_s":..,"invalid_report_ns":..,
//    "invalid_report_per_s":..,"invalid_violations":..,"valid_result":bool,
//    "invalid_result":bool,"invalid_errors":[..]}
// or {"ok":false,"error":..} (exit status 1) when ajv cannot be loaded or
// the schema does not compile.  *_result is what ajv answered (true = valid);
// the caller checks them.  invalid_*: first error only (allErrors: false,
// the ajv default); invalid_report_*: allErrors: true, errors collected.
"use strict";

const fs = require("fs");
const path = require("path");

function parseArgs(argv) {
  const a = { dir: null, npm: process.env.AJV_NPM_DIR || "build/npm", secs: 1, formats: false };
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === "--npm") a.npm = argv[++i];
    else if (argv[i] === "--secs") a.secs = Number(argv[++i]);
    else if (argv[i] === "--formats") a.formats = true;
    else if (a.dir === null) a.dir = argv[i];
    else throw new Error("unexpected argument " + argv[i]);
  }
  if (!a.dir || !a.npm || !(a.secs > 0)) throw new Error("usage: bench_ajv.js DIR [--npm NPM_DIR] [--secs S] [--formats]");
  return a;
}

function fail(msg) {
  console.log(JSON.stringify({ ok: false, error: msg }));
  process.exit(1);
}

const nowNs = () => process.hrtime.bigint();

// ns per call of fn(), over about `secs` seconds, in batches of 1000 so the
// clock is read rarely.  `want` is the expected answer: a change of answer
// mid-run would mean the timing measures something else.  warm: an untimed
// warm-up first (0.25 s, at most `secs`): V8 needs a while (0.1-0.2 s here)
// to optimise a large generated validator, and the figure wanted is the
// steady state of a long-running service.
function timeCalls(fn, want, secs, warm) {
  for (let w = warm ? 0 : 1; w < 2; w++) {
    const limit = BigInt(Math.round((w === 0 ? Math.min(secs, 0.25) : secs) * 1e9));
    let iters = 0;
    const t0 = nowNs();
    let t;
    do {
      for (let k = 0; k < 1000; k++) {
        if (fn() !== want) fail("ajv changed its answer during the timing loop");
      }
      iters += 1000;
      t = nowNs() - t0;
    } while (t < limit);
    if (w === 1) return Number(t) / iters;
  }
  return 0;
}

function main() {
  let args;
  try {
    args = parseArgs(process.argv.slice(2));
  } catch (e) {
    fail(e.message);
  }
  const mods = path.resolve(args.npm, "node_modules");
  let Ajv2020, addFormats, version;
  try {
    const m = require(path.join(mods, "ajv", "dist", "2020"));
    Ajv2020 = m.default || m;
    version = require(path.join(mods, "ajv", "package.json")).version;
    if (args.formats) {
      const f = require(path.join(mods, "ajv-formats"));
      addFormats = f.default || f;
    }
  } catch (e) {
    fail("cannot load ajv from " + mods + ": " + e.message.split("\n")[0]);
  }
  const read = (name) => fs.readFileSync(path.join(args.dir, name), "utf8");
  const schemaText = read("schema.json");
  const valid = JSON.parse(read("valid.json"));
  const invalid = JSON.parse(read("invalid.json"));

  // strict: false only silences ajv's style advice (e.g. strictTypes on
  // `propertyNames` without "type"); it changes no validation result.
  const make = (allErrors) => {
    const ajv = new Ajv2020({ allErrors, strict: false, validateFormats: args.formats });
    if (args.formats) addFormats(ajv);
    return ajv;
  };
  let ajv, ajvAll, first, all;
  try {
    ajv = make(false);
    ajvAll = make(true);
    first = ajv.compile(JSON.parse(schemaText));
    all = ajvAll.compile(JSON.parse(schemaText));
  } catch (e) {
    fail("ajv compile failed: " + e.message);
  }

  // Compile time: the first compile above also compiled the 2020-12
  // metaschema (ajv checks schemas against it), so later ones measure the
  // schema alone.  ajv caches by schema object: every compile gets a fresh
  // copy (parsed outside the timed part) and is removed again afterwards.
  const limit = BigInt(Math.round((args.secs / 2) * 1e9));
  let n = 0;
  let spent = 0n;
  while (spent < limit) {
    const batch = [];
    for (let k = 0; k < 5; k++) batch.push(JSON.parse(schemaText));
    const t0 = nowNs();
    for (const s of batch) ajv.compile(s);
    spent += nowNs() - t0;
    for (const s of batch) ajv.removeSchema(s);
    n += batch.length;
  }
  const compileUs = Number(spent) / n / 1e3;

  const validResult = first(valid);
  const invalidResult = first(invalid);
  const allValid = all(valid);
  const allInvalid = all(invalid);
  const errors = (all.errors || []).map((e) => e.instancePath + " " + e.keyword);
  if (allValid !== validResult || allInvalid !== invalidResult)
    fail("ajv allErrors:true and allErrors:false disagree");

  // As tests/bench_schema.c does: ROUNDS rounds of every case in turn, each
  // case secs / ROUNDS long, and the median round per case, so that a
  // passing disturbance of the machine weighs on every case alike.
  let count = 0;
  const cases = [
    [() => first(valid), validResult],
    [() => first(invalid), invalidResult],
    [() => {
      const r = all(invalid);
      count = all.errors ? all.errors.length : 0;
      return r;
    }, invalidResult],
  ];
  const ROUNDS = 5;
  const rounds = cases.map(() => []);
  for (let r = 0; r < ROUNDS; r++)
    cases.forEach(([fn, want], i) => rounds[i].push(timeCalls(fn, want, args.secs / ROUNDS, r === 0)));
  const median = (xs) => xs.slice().sort((a, b) => a - b)[xs.length >> 1];
  const [vNs, iNs, irNs] = rounds.map(median);

  const r1 = (x) => Math.round(x * 10) / 10;
  console.log(JSON.stringify({
    ok: true, version, format_assert: args.formats ? 1 : 0,
    compile_us: r1(compileUs),
    valid_ns: Math.round(vNs), valid_per_s: Math.round(1e9 / vNs),
    invalid_ns: Math.round(iNs), invalid_per_s: Math.round(1e9 / iNs),
    invalid_report_ns: Math.round(irNs), invalid_report_per_s: Math.round(1e9 / irNs),
    invalid_violations: count, valid_result: validResult, invalid_result: invalidResult,
    invalid_errors: errors,
  }));
}

main();
