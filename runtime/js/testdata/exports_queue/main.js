export default { async queue(batch) {} };
