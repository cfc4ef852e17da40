// The browser suites' Chromium: Debian's headless chromium driven by puppeteer-core (which
// downloads no browser), and the folder the suites write their screenshots and records to.
//
//   CHROMIUM=/path/to/chromium           another Chromium binary (default /usr/bin/chromium)
//   SALE_PAGE_ARTIFACTS=/some/dir        where screenshots go (default: flashgate-sale-page in the OS temp dir)
import { existsSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import puppeteer from "puppeteer-core";

export const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
export const ARTIFACTS = process.env.SALE_PAGE_ARTIFACTS ?? join(tmpdir(), "flashgate-sale-page");

/** Headless Chromium, launched once per suite; ARTIFACTS exists afterwards. */
export async function launchChromium() {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`${CHROMIUM} missing: run scripts/services.sh --test-tools (installs Debian's chromium)`);
  }
  mkdirSync(ARTIFACTS, { recursive: true });
  return puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    // --no-sandbox: the suite runs as root in CI containers, where Chromium's sandbox cannot start.
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
  });
}
