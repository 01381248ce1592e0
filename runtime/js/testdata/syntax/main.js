import { f } from "./broken.js";

export default { queue() { f(); } };
