const x = 1;
null.boom;
export default {};
