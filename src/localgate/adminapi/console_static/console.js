// Progressive enhancement only: every page works without this file.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  // Forms that need a second thought (revoking a key) ask for it.
  for (const form of document.querySelectorAll("form[data-confirm]")) {
    form.addEventListener("submit", (event) => {
      if (!window.confirm(form.dataset.confirm)) event.preventDefault();
    });
  }
  // A new key can be copied with one click (the button is hidden without script).
  for (const button of document.querySelectorAll("button[data-copy]")) {
    const source = document.getElementById(button.dataset.copy);
    if (!source || !navigator.clipboard) continue;
    button.hidden = false;
    button.addEventListener("click", () => navigator.clipboard.writeText(source.textContent));
  }
  const verifier = document.getElementById("verifier");
  if (verifier) proofChecks(verifier);
  const verification = document.getElementById("verification");
  if (verification && verification.dataset.state === "running") followVerification(verification);
});

// -- a background verification's progress (the overview) ------------------------------

// Polls the job's small JSON state and shows records checked of total; once it is done,
// the page is loaded again to show the result (without script: the Refresh link).
function followVerification(section) {
  const bar = document.getElementById("verify-progress");
  const count = document.getElementById("verify-count");
  const template = section.dataset.progressText;
  const poll = async () => {
    let job;
    try {
      const answer = await fetch(section.dataset.jobUrl, {
        credentials: "same-origin",
        headers: { accept: "application/json" },
      });
      if (!answer.ok) return; // logged out or refused: the Refresh link says why
      job = await answer.json();
    } catch (error) {
      window.setTimeout(poll, 5000);
      return;
    }
    if (job.state !== "running") {
      window.location.reload();
      return;
    }
    bar.max = Math.max(job.total, 1);
    bar.value = job.checked;
    count.textContent = fill(template, { checked: job.checked, total: job.total });
    window.setTimeout(poll, 1000);
  };
  window.setTimeout(poll, 500);
}

// -- checking proof bundles in the browser (the record page) --------------------------
//
// The same checks as `localgate audit check-proof` (docs/audit.md, "Proof bundles"):
// the checkpoint's Ed25519 signature under the verifier key in the page's field (the
// published one, or one the user pasted), the log's name, the signed size and root, the
// leaf hash, the RFC 9162 inclusion proof recomputed with SHA-256 (or SM3 for the `sm`
// suite), and the ciphertexts' digests. Nothing here trusts the server: it only hands
// over the bundle.

class Failure extends Error {
  constructor(step, reason, detail) {
    super(reason);
    this.step = step;
    this.reason = reason;
    this.detail = detail;
  }
}

function fill(template, values) {
  return template.replace(/\{(\w+)\}/g, (whole, name) => (name in values ? String(values[name]) : whole));
}

function fromBase64(text, step) {
  if (typeof text !== "string" || !/^[A-Za-z0-9+/]*={0,2}$/.test(text)) {
    throw new Failure(step, "unreadable");
  }
  let binary;
  try {
    binary = atob(text);
  } catch (error) {
    throw new Failure(step, "unreadable");
  }
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

function concat(...parts) {
  const out = new Uint8Array(parts.reduce((n, part) => n + part.length, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

function same(a, b) {
  return a.length === b.length && a.every((byte, i) => byte === b[i]);
}

function hex(bytes) {
  return Array.from(bytes, (byte) => byte.toString(16).padStart(2, "0")).join("");
}

async function sha256(...parts) {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", concat(...parts)));
}

// SM3 (GB/T 32905-2016), which no browser's WebCrypto offers, for logs of the `sm` suite.
function sm3(message) {
  const rotl = (x, n) => ((x << (n % 32)) | (x >>> ((32 - (n % 32)) % 32))) >>> 0;
  const p0 = (x) => (x ^ rotl(x, 9) ^ rotl(x, 17)) >>> 0;
  const p1 = (x) => (x ^ rotl(x, 15) ^ rotl(x, 23)) >>> 0;
  const blocks = Math.ceil((message.length + 9) / 64);
  const padded = new Uint8Array(blocks * 64);
  padded.set(message);
  padded[message.length] = 0x80;
  const view = new DataView(padded.buffer);
  const bits = message.length * 8;
  view.setUint32(padded.length - 8, Math.floor(bits / 0x100000000));
  view.setUint32(padded.length - 4, bits >>> 0);
  const v = [0x7380166f, 0x4914b2b9, 0x172442d7, 0xda8a0600, 0xa96f30bc, 0x163138aa, 0xe38dee4d, 0xb0fb0e4e];
  const w = new Array(68);
  const w1 = new Array(64);
  for (let block = 0; block < blocks; block++) {
    for (let j = 0; j < 16; j++) w[j] = view.getUint32(block * 64 + j * 4);
    for (let j = 16; j < 68; j++) {
      w[j] = (p1(w[j - 16] ^ w[j - 9] ^ rotl(w[j - 3], 15)) ^ rotl(w[j - 13], 7) ^ w[j - 6]) >>> 0;
    }
    for (let j = 0; j < 64; j++) w1[j] = (w[j] ^ w[j + 4]) >>> 0;
    let [a, b, c, d, e, f, g, h] = v;
    for (let j = 0; j < 64; j++) {
      const t = j < 16 ? 0x79cc4519 : 0x7a879d8a;
      const ss1 = rotl((rotl(a, 12) + e + rotl(t, j)) >>> 0, 7);
      const ss2 = (ss1 ^ rotl(a, 12)) >>> 0;
      const ff = j < 16 ? a ^ b ^ c : (a & b) | (a & c) | (b & c);
      const gg = j < 16 ? e ^ f ^ g : (e & f) | (~e & g);
      const tt1 = ((ff >>> 0) + d + ss2 + w1[j]) >>> 0;
      const tt2 = ((gg >>> 0) + h + ss1 + w[j]) >>> 0;
      d = c;
      c = rotl(b, 9);
      b = a;
      a = tt1;
      h = g;
      g = rotl(f, 19);
      f = e;
      e = p0(tt2);
    }
    [a, b, c, d, e, f, g, h].forEach((x, i) => {
      v[i] = (v[i] ^ x) >>> 0;
    });
  }
  const out = new Uint8Array(32);
  const outView = new DataView(out.buffer);
  v.forEach((x, i) => outView.setUint32(i * 4, x));
  return out;
}

// The suite's hash: SHA-256 (WebCrypto) for `standard`, SM3 for `sm`.
function hashOf(suite) {
  if (suite === "standard") return sha256;
  if (suite === "sm") return async (...parts) => sm3(concat(...parts));
  throw new Failure("bundle", "unreadable");
}

const utf8 = new TextEncoder();

// `<name>+<8 hex digits>+base64(0x01 || 32-byte Ed25519 key)` (c2sp.org/signed-note).
async function parseVerifierKey(text) {
  const trimmed = text.trim();
  const first = trimmed.indexOf("+");
  const second = trimmed.indexOf("+", first + 1);
  if (first <= 0 || second < 0) throw new Failure("key", "key_malformed");
  const name = trimmed.slice(0, first);
  const id = trimmed.slice(first + 1, second);
  if (!/^[0-9a-fA-F]{8}$/.test(id) || /\s/.test(name)) throw new Failure("key", "key_malformed");
  const raw = fromBase64(trimmed.slice(second + 1), "key");
  if (raw.length !== 33 || raw[0] !== 0x01) throw new Failure("key", "key_malformed");
  const publicKey = raw.slice(1);
  const digest = await sha256(utf8.encode(name + "\n"), new Uint8Array([0x01]), publicKey);
  if (hex(digest.slice(0, 4)) !== id.toLowerCase()) throw new Failure("key", "key_id");
  return { name, id: id.toLowerCase(), publicKey };
}

// The note's signed text once the key's signature on it verifies.
async function openNote(note, key) {
  if (typeof note !== "string") throw new Failure("bundle", "unreadable");
  const blank = note.lastIndexOf("\n\n");
  if (blank < 0 || !note.endsWith("\n")) throw new Failure("signature", "not_signed");
  const text = note.slice(0, blank + 1);
  const lines = note.slice(blank + 2, -1).split("\n");
  let signature = null;
  for (const line of lines) {
    if (!line.startsWith("\u2014 ")) throw new Failure("signature", "not_signed");
    const rest = line.slice(2);
    const space = rest.indexOf(" ");
    if (space < 0) throw new Failure("signature", "not_signed");
    const raw = fromBase64(rest.slice(space + 1), "signature");
    if (rest.slice(0, space) === key.name && raw.length > 4 && hex(raw.slice(0, 4)) === key.id) {
      signature = raw.slice(4);
    }
  }
  if (signature === null) throw new Failure("signature", "not_signed");
  let publicKey;
  try {
    publicKey = await crypto.subtle.importKey("raw", key.publicKey, { name: "Ed25519" }, false, ["verify"]);
  } catch (error) {
    throw new Failure("signature", "no_ed25519");
  }
  const valid = await crypto.subtle.verify({ name: "Ed25519" }, publicKey, signature, utf8.encode(text));
  if (!valid) throw new Failure("signature", "bad_signature");
  return text;
}

// origin, tree size, root hash, time: the four lines of a checkpoint's text.
function parseCheckpoint(text) {
  const lines = text.slice(0, -1).split("\n");
  if (lines.length !== 4 || !/^(0|[1-9][0-9]*)$/.test(lines[1]) || !lines[3].startsWith("time ")) {
    throw new Failure("checkpoint", "unreadable");
  }
  return {
    origin: lines[0],
    size: BigInt(lines[1]),
    root: fromBase64(lines[2], "checkpoint"),
    time: lines[3].slice(5),
  };
}

// RFC 9162 section 2.1.3.2: the root the proof leads to from leaf `index` of `size`
// leaves, or null if the proof's length does not fit. BigInt: indexes pass 2**31.
async function rootFromProof(hash, index, size, leaf, proof) {
  if (index < 0n || index >= size) return null;
  let fn = index;
  let sn = size - 1n;
  let node = leaf;
  const inner = new Uint8Array([0x01]);
  for (const sibling of proof) {
    if (sn === 0n) return null;
    if ((fn & 1n) === 1n || fn === sn) {
      node = await hash(inner, sibling, node);
      while ((fn & 1n) === 0n && fn !== 0n) {
        fn >>= 1n;
        sn >>= 1n;
      }
    } else {
      node = await hash(inner, node, sibling);
    }
    fn >>= 1n;
    sn >>= 1n;
  }
  return sn === 0n ? node : null;
}

const DIGESTS = { payload: "payload_digest", prompt: "prompt_digest" };

async function checkBundle(bundle, keyText) {
  const key = await parseVerifierKey(keyText);
  if (bundle === null || typeof bundle !== "object" || Array.isArray(bundle)) {
    throw new Failure("bundle", "unreadable");
  }
  if ((bundle.format ?? "localgate-proof-bundle/1") !== "localgate-proof-bundle/1") {
    throw new Failure("bundle", "unreadable");
  }
  const checkpoint = parseCheckpoint(await openNote(bundle.checkpoint, key));
  const hash = hashOf(bundle.suite);
  const headerBytes = fromBase64(bundle.header, "bundle");
  let header;
  try {
    header = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(headerBytes));
  } catch (error) {
    throw new Failure("bundle", "unreadable");
  }
  if (!Number.isInteger(bundle.seq) || !Array.isArray(bundle.proof)) {
    throw new Failure("bundle", "unreadable");
  }
  if (!checkpoint.origin.endsWith("/audit/" + header.tenant)) throw new Failure("origin", "other_log");
  if ((bundle.origin ?? checkpoint.origin) !== checkpoint.origin) throw new Failure("origin", "other_log");
  if ((bundle.tenant ?? header.tenant) !== header.tenant) throw new Failure("origin", "other_log");
  if ("tree_size" in bundle && BigInt(bundle.tree_size) !== checkpoint.size) {
    throw new Failure("checkpoint", "mismatch");
  }
  if ("root" in bundle && !same(fromBase64(bundle.root, "checkpoint"), checkpoint.root)) {
    throw new Failure("checkpoint", "mismatch");
  }
  const leaf = await hash(new Uint8Array([0x00]), headerBytes);
  if ("leaf_hash" in bundle && !same(fromBase64(bundle.leaf_hash, "leaf"), leaf)) {
    throw new Failure("leaf", "leaf_mismatch");
  }
  const proof = bundle.proof.map((node) => fromBase64(node, "inclusion"));
  const root = await rootFromProof(hash, BigInt(bundle.seq), checkpoint.size, leaf, proof);
  if (
    root === null ||
    !same(root, checkpoint.root) ||
    header.seq !== bundle.seq ||
    (bundle.leaf_index ?? bundle.seq) !== bundle.seq
  ) {
    throw new Failure("inclusion", "not_included");
  }
  for (const [name, encoded] of Object.entries(bundle.ciphertexts ?? {})) {
    const field = DIGESTS[name];
    if (!field) throw new Failure("ciphertext", "ciphertext");
    if (hex(await hash(fromBase64(encoded, "ciphertext"))) !== header[field]) {
      throw new Failure("ciphertext", "ciphertext");
    }
  }
  return {
    kind: header.kind,
    seq: bundle.seq,
    tenant: header.tenant,
    origin: checkpoint.origin,
    size: String(checkpoint.size),
    time: checkpoint.time,
    key_id: key.id,
  };
}

function proofChecks(verifier) {
  const texts = JSON.parse(verifier.dataset.texts);
  const keyField = document.getElementById("verifier-key");
  const sections = Array.from(document.querySelectorAll("[data-proof-url]"));
  const bundles = new Map(); // url -> the bundle fetched, or the reason it could not be

  const show = (status, outcome) => {
    status.classList.remove("ok", "bad");
    if (outcome.verified) {
      status.classList.add("ok");
      status.textContent = "\u2713 " + fill(texts.ok, outcome.verified);
    } else if (outcome.failure) {
      status.classList.add("bad");
      const { step, reason } = outcome.failure;
      status.dataset.step = step;
      status.textContent = "\u2717 " + fill(texts.failed, {
        step: texts["step_" + step] || step,
        reason: texts[reason] || reason,
      });
    } else {
      status.textContent = fill(texts.unavailable, { reason: outcome.unavailable });
    }
    status.dataset.result = outcome.verified ? "verified" : outcome.failure ? "failed" : "unavailable";
  };

  const check = async (bundle) => {
    if (!keyField.value.trim()) return { unavailable: texts.no_key };
    try {
      return { verified: await checkBundle(bundle, keyField.value) };
    } catch (error) {
      if (error instanceof Failure) return { failure: error };
      return { failure: new Failure("bundle", "unreadable") };
    }
  };

  const fetchBundle = async (url) => {
    if (!bundles.has(url)) {
      try {
        const answer = await fetch(url, { credentials: "same-origin", headers: { accept: "application/json" } });
        const content = await answer.json();
        bundles.set(url, answer.ok ? { bundle: content } : { unavailable: content.error.message });
      } catch (error) {
        bundles.set(url, { unavailable: texts.unreadable });
      }
    }
    return bundles.get(url);
  };

  const checkAll = async () => {
    for (const section of sections) {
      const status = section.querySelector(".proof-status");
      status.classList.remove("ok", "bad");
      status.textContent = texts.checking;
      const fetched = await fetchBundle(section.dataset.proofUrl);
      show(status, fetched.bundle !== undefined ? await check(fetched.bundle) : fetched);
    }
  };

  for (const element of verifier.querySelectorAll(".js-only")) element.hidden = false;
  document.getElementById("check-proofs").addEventListener("click", checkAll);
  const file = document.getElementById("bundle-file");
  file.addEventListener("change", async () => {
    const status = document.getElementById("bundle-file-status");
    if (!file.files.length) return;
    status.textContent = texts.checking;
    let bundle = null;
    try {
      bundle = JSON.parse(await file.files[0].text());
    } catch (error) {
      bundle = null;
    }
    show(status, await check(bundle));
  });
  checkAll();
}
