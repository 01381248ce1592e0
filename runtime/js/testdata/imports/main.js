import { double } from "./lib/util.js";
import greet from "helper.js";
import * as util from "./lib/util.js";

export default {
  async fetch(request, env) {
    return Response.json({ double: double(21), greet: greet("x"), names: Object.keys(util).sort(), twice: util.twice });
  },
  async queue(batch) {
    util.explode();
  },
};
