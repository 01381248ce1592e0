export const a = 1;
import fs from "fs";
export default { fetch() { return new Response(fs); } };
