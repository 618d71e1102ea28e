// The race behind Spark's "Task serialization failed: Illegal size 5 of collection, expected 6", without Spark.
//
// Two threads do what two streaming queries' PythonStreamingSourceRunner.init do in a driver that just started:
// put the runner's four keys into one scala.collection.mutable.HashMap (the envVars of the Python function Spark
// keeps for a data source it found itself, which holds PYTHONPATH). Both find a key's bucket empty, both link a
// node there, one node is lost and both count it: the map then says 6 entries and iterates 5, and every later
// Java serialisation of it (each task of the format) fails in DefaultSerializationProxy.writeObject.
//
//   J=.venv/lib/python3.11/site-packages/pyspark/jars/scala-library-2.13.18.jar
//   java -Xint -cp $J bench/IllegalSizeRace.java 5000
//
// -Xint runs the code interpreted, which widens the window as a loaded machine does (here: 3 of 25,000 trials in
// three runs); compiled, the window is far narrower (0 of 20,000 without -Xint).

import java.io.ByteArrayOutputStream;
import java.io.ObjectOutputStream;
import java.util.concurrent.CyclicBarrier;
import scala.collection.mutable.HashMap;

public class IllegalSizeRace {
    public static void main(String[] args) throws Exception {  // args: [trials]
        String[] keys = {"SPARK_LOCAL_DIRS", "SPARK_AUTH_SOCKET_TIMEOUT", "SPARK_BUFFER_SIZE", "SPARK_PYTHON_RUNTIME"};
        int trials = args.length > 0 ? Integer.parseInt(args[0]) : 5000;
        int bad = 0;
        for (int t = 0; t < trials; t++) {
            HashMap<String, String> env = new HashMap<>();
            env.put("PYTHONPATH", "p");
            CyclicBarrier together = new CyclicBarrier(2);
            Runnable init = () -> {
                try {
                    together.await();
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
                for (String key : keys) {
                    env.put(key, "v");
                }
            };
            Thread a = new Thread(init);
            Thread b = new Thread(init);
            a.start();
            b.start();
            a.join();
            b.join();
            int[] entries = {0};
            env.foreach(kv -> entries[0]++);
            if (entries[0] != env.size()) {
                bad++;
                String serialised;
                try {
                    new ObjectOutputStream(new ByteArrayOutputStream()).writeObject(env);
                    serialised = "serialised";
                } catch (IllegalStateException e) {
                    serialised = e.toString();
                }
                System.out.println("trial " + t + ": size " + env.size() + ", entries " + entries[0] + ": "
                        + serialised);
            }
        }
        System.out.println(bad + " of " + trials + " trials left the map counting an entry it does not have");
    }
}
