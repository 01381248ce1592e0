declare module "*/uPlot.esm.js" {
  import uPlot from "uplot";
  export default uPlot;
}
