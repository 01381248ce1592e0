// The package's Forms are the Form URLs of the spec (components.schemas.FormUrl
// of the bundled OpenAPI document, the one list make generate writes from).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { Forms } from "../src/client.js";

test("Forms lists exactly the spec's Form URLs", () => {
  const doc = JSON.parse(readFileSync(new URL("../../gen/api/openapi.json", import.meta.url), "utf8"));
  const want = [...doc.components.schemas.FormUrl.enum].sort();
  assert.deepEqual([...Object.values(Forms)].sort(), want);
});
